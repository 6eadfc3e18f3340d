// Shapes of the static-shape ("graph") mode's fixed-size exchange (iser/moe_ep_graph.h): the
// layout the graph dispatch / receive kernels (src/cuda/moe_graph_kernels.h) address and the MoE
// layer sizes its buffers by. Host and device arithmetic, no CUDA types.
#pragma once

#include <cstdint>

namespace iser::moe {

// Row counts are in rows of He bf16; the header of a block is int32[H + S] in its first header_rows
// rows.
struct GraphDims {
  int num_ranks = 0;         // P
  int experts_per_rank = 0;  // H
  int slots_per_rank = 0;    // L = H + S
  int num_tokens = 0;        // tau
  int top_k = 0;
  int hidden = 0;       // He
  int peer_rows = 0;    // tau * k: rows a source sends one destination at most
  int header_rows = 0;  // ceil(4 L / (2 He))
  int slot_rows = 0;    // C = tau * P

  constexpr int block_rows() const { return header_rows + peer_rows; }  // one peer's block
  constexpr int64_t exchange_rows() const { return int64_t{num_ranks} * block_rows(); }
  constexpr int64_t return_rows() const { return int64_t{num_ranks} * peer_rows; }
  constexpr int64_t expert_rows() const { return int64_t{slots_per_rank} * slot_rows; }
  constexpr int total_slots() const { return num_ranks * slots_per_rank; }
  // Wire row of destination d's block that carries its route at position pos (0-based).
  constexpr int64_t send_row(int dest, int pos) const {
    return int64_t{dest} * block_rows() + header_rows + pos;
  }
};

}  // namespace iser::moe
