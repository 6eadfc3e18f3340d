// Slot balancer (docs/design.md §9, §12): the per-invocation half of ISER-MoE for an engine's own
// EP MoE layer, behind the TensorRT-LLM slot contract (num_slots = P * (H + S)). The layer keeps
// its routed experts' weights in the balancer's slots (home experts then helper slots, in iser's
// symmetric memory) and asks, per forward, for the slot of every route:
//
//   route(topk_ids, slot_ids, stream)   COPY: count -> count exchange -> GPU plan + rewrite ->
//                                       copy list; `stream` then waits for the slot ids only
//   replicate()                         COPY: replication -> READY gate
//   ready(stream)                       `stream` waits for the gate; helper slots whose replica
//                                       is missing are refilled from their owner's home bundle
//   (the layer's helper-slot work)      on `stream`, after ready()
//
// Nothing synchronises with the host and no host value depends on the routing: generations and
// epochs are the device's (kDeviceGeneration), so an invocation can be captured in a CUDA graph.
// The next route() releases the helper bank on its stream (the reuse fence), so the layer's use
// of the helper slots must be stream-ordered before it.
//
// READY failure (a writer timed out, failed or ran late): ready() copies the expert's home bundle
// into each helper slot the gate did not validate, so the helper routes compute with the home
// expert's bytes and the output is unchanged; stats() counts the slots, logs the failure and
// clears it. A plan with a status routes every token to its home slot (GpuPlanner).
//
// Two modes, as Runtime: one rank per process (a Communicator of P ranks), or all P ranks on the
// current GPU (logical(): tests, development); every call then acts on all local ranks at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "iser/gpu_planner.h"
#include "iser/runtime.h"

namespace iser {

struct SlotBalancerConfig {
  int num_ranks = 0;                       // P
  int num_experts = 0;                     // E (P | E)
  int num_slots = 0;                       // S helper slots per rank, >= 1
  std::string policy = "halo-q";           // a policy the GPU planner covers (gpu_planner_options)
  Transport transport = Transport::kPlan;  // an SM transport (not copy-engine / multicast)
  int copy_sms = kDefaultCopySms;
  int max_tokens = 0;  // tokens per rank per call, at most
  int top_k = 0;       // routes per token, at most (max_tokens * top_k <= kGpuMaxRoutesPerRank)
  int64_t timeout_us = 2'000'000;  // device-side waits give up after this
  // Bytes of one expert in each of the layer's weight tensors (weights, scales, ...). Each field
  // starts at a kFieldAlignment boundary of the expert's bundle.
  std::vector<int64_t> field_bytes;

  static constexpr int64_t kFieldAlignment = 256;
  int experts_per_rank() const { return num_experts / num_ranks; }
  void validate() const;  // throws iser::Error naming the field and value
};

struct SlotBalancerStats {
  uint64_t fallback_slots = 0;  // helper slots refilled from home bundles (cumulative, all local)
  uint64_t ready_failures = 0;  // READY failures seen by stats() (cumulative)
  uint32_t planner_errors = 0;  // GpuStatus bits of count/rewrite since the last stats()
  uint32_t plan_status = 0;     // GpuStatus of the last plan (kGpuOk: balanced)
  int32_t num_ops = 0;          // replications of the last plan (-1: copy list refused)
  std::string last_failure;     // the last READY failure, or empty
};

class SlotBalancer {
 public:
  // One rank per process on the current device; collective over `comm` (Runtime's set-up).
  SlotBalancer(const SlotBalancerConfig& config, Communicator& comm);
  // All P ranks on the current device.
  static std::unique_ptr<SlotBalancer> logical(const SlotBalancerConfig& config);
  ~SlotBalancer();
  SlotBalancer(const SlotBalancer&) = delete;
  SlotBalancer& operator=(const SlotBalancer&) = delete;

  const SlotBalancerConfig& config() const;
  Runtime& runtime() const;
  int num_local_ranks() const;
  int first_rank() const;

  // Slot memory of local rank `local_idx`: H + S slots (home experts r*H.., then helpers), slot
  // l at slots(local_idx) + l * slot_stride(), field f at field_offset(f) inside it. Local ranks
  // of one process are region_bytes() apart.
  void* slots(int local_idx) const;
  int64_t slot_stride() const;
  int64_t field_offset(int field) const;
  int64_t region_bytes() const;

  // topk_ids [num_local][num_tokens * top_k] int32 (-1 = none) -> slot_ids (same shape, global
  // slot ids, -1 stays -1). num_tokens <= max_tokens, top_k <= config top_k. Enqueues the copy
  // stream's planning behind `stream` and makes `stream` wait for the slot ids.
  void route(const int32_t* topk_ids, int num_tokens, int top_k, int32_t* slot_ids,
             StreamHandle stream);
  // Replication of the last route()'s plan and its READY gate, on the copy stream.
  void replicate();
  // `stream` waits for the READY gate and refills unvalidated helper slots (see above).
  void ready(StreamHandle stream);
  // Release the helper bank of the last replicate() on `stream` (route() does it when needed).
  void release(StreamHandle stream);

  StreamHandle copy_stream() const;
  // Device words of the last route(): the plan (GpuPlanLayout) and local rank 0's count matrix
  // [P][E].
  const int32_t* plan() const;
  const GpuPlanLayout& plan_layout() const;
  const int32_t* count_matrix() const;

  // Synchronises the device. READY failures are logged to stderr, counted and cleared; any other
  // runtime failure, or a planner error other than a rejected plan, throws iser::Error.
  SlotBalancerStats stats();

 private:
  friend struct testing::Access;  // include/iser/testing/hooks.h: the fault stream below
  // Fault injection (tests, logical mode): from the next replicate() on, local rank `local_idx`
  // replicates on `stream` (after the plan) instead of the copy stream, so that work the caller
  // puts on `stream` first delays that rank's copy and READY; -1 restores the copy stream.
  // Synchronises the device; faulted calls name their generation, so the gate waits for the
  // delayed rank (READY failure after the timeout) instead of running before its replicate.
  void set_fault_stream(int local_idx, StreamHandle stream);

  struct Impl;
  explicit SlotBalancer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace iser
