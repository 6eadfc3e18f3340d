// Kernels of the EP layer's static-shape graph mode (include/iser/moe_ep_graph.h,
// src/moe/ep_graph_layer.cpp): each a plain Params struct, a Config of launch constants, one
// __global__ entry in its own .cu file and one launch helper declared here. Every size they take
// from the host is fixed at set-up (GraphDims); everything that depends on the routing is read
// from device memory, so a captured launch is valid for every routing.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "iser/copy_list.h"
#include "iser/moe_graph_dims.h"

namespace iser::cuda {

using moe::GraphDims;

// Error bits of the graph mode (a device word; 0 = none).
enum GraphError : uint32_t {
  kGraphBadExpertId = 1u << 0,   // dispatch: an id outside [-1, E) (dropped)
  kGraphSlotOverflow = 1u << 1,  // receive: a slot got more than C rows (rows beyond dropped)
  kGraphBadHeader = 1u << 2,     // receive: a block's header claims more than tau * k rows
};

// ---- dispatch: routes -> fixed per-destination blocks ---------------------------------------
// One CTA. A route's global slot comes from the GPU rewrite (slot_ids) or, without one (OFF), is
// its expert's home slot. When the copy list was refused (*num_ops < 0: no replica will be
// validated) a route to a helper slot goes to its expert's home slot instead. Routes are sorted
// stably by slot (slot, token, j: the eager layer's wire order): destination d's block gets
// header[l] = its routes for local slot l, and its route at position pos (slots in order) in
// wire row dims.send_row(d, pos). Writes, over every row of the fixed exchange:
//   send_token[w]  token whose row goes to wire row w, -1 (header or unused rows)
//   route_row[i]   row of route i in the returned [P][tau * k] buffer (d * peer_rows + pos), -1
// and the headers into the send buffer. No position can exceed tau * k: a source has no more.
struct GraphDispatchConfig {
  static constexpr int kThreads = 1024;
  // Dynamic shared memory: counters and begins of every global slot, one ordinal per route.
  static constexpr int kMaxSmemBytes = 48 * 1024;
  static int smem_bytes(const GraphDims& dims) {
    return static_cast<int>(sizeof(int32_t)) *
           (2 * dims.total_slots() + dims.num_tokens * dims.top_k);
  }
};
struct GraphDispatchParams {
  GraphDims dims;
  const int32_t* topk_ids = nullptr;  // [tau * k], -1 = none
  const int32_t* slot_ids = nullptr;  // [tau * k] global slots of the rewrite, or null (home)
  const int32_t* num_ops = nullptr;   // plan_copy_list's op count (-1: refused), or null
  uint16_t* send = nullptr;           // [P][block_rows][He]: headers written here
  int32_t* send_token = nullptr;      // [P * block_rows]
  int32_t* route_row = nullptr;       // [tau * k]
  uint32_t* error_word = nullptr;     // GraphError bits
};
void launch_graph_dispatch(const GraphDispatchParams& params, cudaStream_t stream);

// ---- receive: headers of the received blocks -> row maps ------------------------------------
// One CTA. Source s's block holds its rows for this rank's slots in local-slot order, counted by
// its header. Slot l's region [l * C, (l + 1) * C) of the expert buffer takes the rows of the
// lower sources first, then this source's, in their order. Writes, for returned row
// r = s * peer_rows + pos (pos < tau * k):
//   recv_row[r]  row of the received buffer ([P][block_rows]) holding it, -1 when unused
//   expert_row[r] row of the expert buffer ([L][C]) it is computed in, -1 when unused
// A header whose rows exceed tau * k is ignored (kGraphBadHeader); rows beyond C are dropped
// (kGraphSlotOverflow): neither can happen for valid inputs.
struct GraphReceiveConfig {
  static constexpr int kThreads = 1024;
  static int smem_bytes(const GraphDims& dims) {
    return static_cast<int>(sizeof(int32_t)) * 3 * dims.total_slots();
  }
};
struct GraphReceiveParams {
  GraphDims dims;
  const uint16_t* recv = nullptr;  // [P][block_rows][He]
  int32_t* recv_row = nullptr;     // [P * peer_rows]
  int32_t* expert_row = nullptr;   // [P * peer_rows]
  int32_t* slot_total = nullptr;   // [L] rows each slot holds (at most C), or null
  uint32_t* error_word = nullptr;
};
void launch_graph_receive(const GraphReceiveParams& params, cudaStream_t stream);

// ---- size-aware GEMMs: each slot's row bucket -> its switch node ---------------------------
// For slot l: value = the first bucket b with bucket_rows[b] >= slot_total[l], or num_buckets
// (no body: the slot is skipped) when the slot is empty; cudaGraphSetConditional(handles[l]).
// Runs only inside the CUDA graph that owns the handles (GroupedMlp::run_switched's nodes).
struct GraphSelectConfig {
  static constexpr int kThreads = 256;
  static constexpr int kMaxSlots = 640;  // GroupedMlp's slot limit
  static constexpr int kMaxBuckets = 8;
};
struct GraphSelectParams {
  const int32_t* slot_total = nullptr;  // [num_slots]
  int32_t num_slots = 0;
  int32_t num_buckets = 0;
  int32_t bucket_rows[GraphSelectConfig::kMaxBuckets] = {};       // increasing
  unsigned long long handles[GraphSelectConfig::kMaxSlots] = {};  // cudaGraphConditionalHandle
};
void launch_graph_select(const GraphSelectParams& params, cudaStream_t stream);

// ---- row moves: dst[dst_map[r]] = src[src_map[r]] for r < num_rows --------------------------
// A null map is the identity; a negative entry skips the row (nothing written).
struct MapRowsConfig {
  static constexpr int kThreads = 128;
  static constexpr int kVec = 8;
  static constexpr int kMaxBlocks = 4096;
};
struct MapRowsParams {
  const uint16_t* src = nullptr;
  uint16_t* dst = nullptr;
  const int32_t* src_map = nullptr;
  const int32_t* dst_map = nullptr;
  int64_t num_rows = 0;
  int hidden = 0;  // multiple of kVec
};
void launch_map_rows(const MapRowsParams& params, cudaStream_t stream);

// ---- READY fallback from the device copy list ------------------------------------------------
// The graph-mode form of launch_fallback_copy: the op of this rank's helper slot h is read from
// the device copy list (the first op whose group holds the rank and whose helper is h; null
// ops never match). When the READY gate did not validate its expert in the slot, the expert's
// home bundle is copied from its owner's symmetric memory into the slot and the slot counted.
struct GraphFallbackConfig {
  static constexpr int kThreads = 256;
  static constexpr int kBlocksPerSlot = 64;
  static constexpr int kMaxSlots = 32;
  static constexpr int kMaxRanks = 72;
};
struct GraphFallbackParams {
  const CopyOp* ops = nullptr;  // [max_ops]
  int32_t max_ops = 0;
  const int32_t* slot_expert = nullptr;  // the READY gate's output [P * S]
  int32_t rank = 0;
  int32_t num_ranks = 0;
  int32_t num_slots = 0;  // S
  int32_t experts_per_rank = 0;
  int64_t bytes = 0;        // bundle bytes, a multiple of 16
  int64_t home_stride = 0;  // bytes between home slots
  uint32_t* fallback_slots = nullptr;
  const char* home_base[GraphFallbackConfig::kMaxRanks] = {};  // rank r's home slot 0, mapped here
  void* dst[GraphFallbackConfig::kMaxSlots] = {};              // this rank's helper slots
};
void launch_graph_fallback(const GraphFallbackParams& params, cudaStream_t stream);

}  // namespace iser::cuda
