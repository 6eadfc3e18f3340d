// Static-shape ("graph") mode of the reference EP MoE layer (docs/design.md §9-§10): one whole
// invocation (routing counts -> count exchange -> GPU plan + route rewrite -> replication ->
// dispatch -> expert GEMMs -> READY gate -> helper GEMMs -> combine) enqueued with no host
// synchronisation and no host value that depends on the routing, so it is captured once in a CUDA
// graph and replayed for every batch of a decode-size bucket, as serving engines capture their
// decode graphs. docs/moe.md draws the streams and explains the costs.
//
// Fixed shapes (tau = LayerConfig::tokens_per_rank, the bucket's tokens per rank, k = top_k):
//  - a source sends every destination one fixed block: a header (its routes per local slot of
//    the destination) and tau * k rows, whatever the routing (NCCL send/recv sizes are fixed);
//  - a local slot has C = tau * P rows (slot_rows). A token's k experts are distinct and a slot
//    holds one expert, so one source sends a slot at most tau routes and no slot can receive
//    more than C: nothing overflows by construction. Every slot's two GEMMs run with M = C (empty
//    slots too: the cost of the fixed shape, see docs/moe.md); a token's output bytes do not
//    depend on M or on its row (GemmBackend::kLtPinned), so the output equals EpMoeLayer's.
// Set-up refuses (iser::Error naming the field and value) C > kGraphMaxSlotRows, a policy or
// shape the GPU planner does not cover (gpu_planner_covers) when balancing, and shapes whose
// header or dispatch tables do not fit (graph_dims).
//
// Inputs and outputs live in layer-owned device buffers whose addresses the graph holds: write
// the next batch's input rows, top-k ids (-1 = no expert) and weights into input(), topk_ids(),
// topk_weights() (stream-ordered before launch(), e.g. cudaMemcpyAsync on stream()), then
// launch(); output() holds the result when the launch completed. A batch of fewer tokens pads
// its ids with -1 (those rows get the shared expert's output only).
//
// ON (GraphLayerOptions::balance, default) equals EpMoeLayer's OFF and ON output bit for bit, on
// every routing. OFF: home slots only (no planner, no replication, no helper slots).
// Input contract: ids in [-1, E), a token's ids distinct. Violations cannot corrupt memory:
// ids out of range are dropped, rows beyond a slot's C are dropped, and finish() throws an
// iser::Error naming the failure (the output of that invocation is then not valid).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "iser/moe.h"
#include "iser/moe_graph_dims.h"
#include "iser/moe_layer.h"
#include "iser/runtime.h"

namespace iser::moe {

// Largest slot capacity C = tau * P. A slot's two GEMMs at M = C do C flop per weight byte: below
// ~128 they are bound by streaming the weights, at 256 every slot is compute-bound on H200
// (measured: docs/benchmarks.md, graph mode), so larger buckets belong to EpMoeLayer.
inline constexpr int kGraphMaxSlotRows = 256;

// The dims of `config`; throws iser::Error (field and value) when the graph mode cannot serve
// it: tau or k < 1, C = tau * P > kGraphMaxSlotRows, a dispatch table beyond its kernel's
// shared memory, and (balance) a policy or shape the GPU planner does not cover. Host only.
GraphDims graph_dims(const LayerConfig& config, bool balance);

struct GraphLayerOptions {
  bool balance = true;  // ON: GPU plan + replication + helper slots; OFF: home slots only
  // Size-aware expert GEMMs (CUDA 12.8+ switch nodes; captured graphs only): each slot runs at the
  // smallest row bucket (8, 16, 32, ... up to C) holding the rows it received, an empty slot not
  // at all, chosen on the device at every launch; the outputs do not change (pinned algorithms).
  // Off: every slot at M = C (1.2-1.6x slower on H200, docs/benchmarks.md). enqueue() (no
  // graph) always runs M = C.
  bool size_aware = true;
};

// What finish() saw of the last launch.
struct GraphLayerResult {
  uint32_t fallback_slots = 0;  // helper slots refilled from home bundles (READY failure)
  bool plan_rejected = false;   // the GPU plan or its copy list failed; ran unbalanced
};

class GraphEpMoeLayer {
 public:
  // runtime: one rank per process, one layer, one helper bank (ep_runtime_config(config)), used
  // by this layer only (the graph numbers generations and epochs on the device). comm: the NCCL
  // communicator of the same P ranks. Allocates the static buffers and builds nothing yet.
  GraphEpMoeLayer(const LayerConfig& config, Runtime& runtime, ncclComm* comm,
                  const GraphLayerOptions& options = {});
  ~GraphEpMoeLayer();
  GraphEpMoeLayer(const GraphEpMoeLayer&) = delete;
  GraphEpMoeLayer& operator=(const GraphEpMoeLayer&) = delete;

  const GraphDims& dims() const;
  // As EpMoeLayer::fill_weights (same values for the same seed).
  void fill_weights(uint64_t seed, float scale);

  // Static buffers: [tau, He] bf16, [tau * k] int32 / float, [tau, He] bf16.
  void* input() const;
  int32_t* topk_ids() const;
  float* topk_weights() const;
  void* output() const;
  Stream stream() const;  // MAIN: launch() and enqueue() run on it

  // One invocation enqueued directly on stream() (the work a launch replays; no graph).
  void enqueue();
  // Captures enqueue() into a CUDA graph and instantiates it (once; again replaces it).
  void capture();
  // Replays the captured invocation on stream(). Throws when nothing was captured.
  void launch();
  // Waits for the last enqueue()/launch(). A READY failure was handled on the device (helper
  // slots refilled from home bundles): logged, counted and cleared. Throws iser::Error on bad
  // inputs (expert ids, a slot over C) and on any other runtime failure.
  GraphLayerResult finish();

 private:
  friend struct ::iser::testing::Access;  // include/iser/testing/hooks.h: the hook below
  // Fault injection (tests): called with the COPY stream right before the replication is
  // enqueued, at capture (its work is then part of the graph) or in enqueue(). Empty removes it.
  void set_copy_hook(std::function<void(Stream)> hook);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace iser::moe
