// Reference EP MoE layer, one process per GPU (DESIGN §9-§10), on the replication runtime.
//
// One invocation on rank r, with two streams:
//   MAIN  shared expert  ->  dispatch (NCCL send/recv by destination slot rank)  ->  home-slot
//         GEMMs  ->  READY gate  ->  helper-slot GEMMs  ->  bank release  ->  combine (NCCL
//         send/recv back, then shared + sum_j w_j y_j in fixed order)
//   COPY  (highest priority) count exchange  ->  [host: plan + routing maps]  ->  replicate
// MAIN never waits for COPY except at the READY gate, and only helper work sits behind it.
// The plan is computed on the host from the exchanged counts (the CPU reference planner, which
// the GPU planner reproduces bit for bit), so forward() synchronizes the host with the count
// exchange once; NCCL's send/recv sizes are host values too. The invocation is therefore not
// capturable in a CUDA graph as a whole (its expert GEMMs and kernels are; see GroupedMlp).
//
// OFF (balance = false): home slots only; no replication, no READY gate.
// ON and OFF outputs are bitwise identical (see include/iser/moe_layer.h for why).
// READY failure (a writer timed out, failed or ran too late): right after the gate, MAIN refills
// each of this rank's helper slots that the gate did not validate with its expert's home bundle,
// read from the owner's symmetric memory, so the helper GEMMs compute those routes with the home
// expert's bytes and the output stays the same; finish() logs it to stderr, reports the count
// (EpLayerTimings::fallback_slots) and clears the runtime status. Other device-side failures
// (count exchange, reuse fence) make finish() throw.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "iser/moe.h"
#include "iser/moe_layer.h"
#include "iser/runtime.h"

namespace iser::moe {

struct EpLayerTimings {
  float layer_ms = 0;           // MAIN: invocation start -> combine done
  float shared_ms = 0;          // MAIN: shared expert
  float copy_ms = 0;            // COPY: replicate kernel (0 when OFF)
  float ready_wait_ms = 0;      // MAIN: READY gate, i.e. the exposed part of the copy (0 when OFF)
  double counts_wait_us = 0;    // host: waiting for the count exchange
  double plan_us = 0;           // host: plan, copy list and routing maps
  uint32_t fallback_slots = 0;  // helper slots refilled from home bundles after a READY failure
};

class EpMoeLayer {
 public:
  // runtime: one rank per process (num_local_ranks() == 1), one layer, bundles of
  // shape.bundle_bytes() weight bytes and no scales. comm: the NCCL communicator of the same P
  // ranks for dispatch/combine (not used by the runtime after set-up).
  EpMoeLayer(const LayerConfig& config, Runtime& runtime, ncclComm* comm);
  ~EpMoeLayer();
  EpMoeLayer(const EpMoeLayer&) = delete;
  EpMoeLayer& operator=(const EpMoeLayer&) = delete;

  // Home experts (global ids r*H..) and the shared expert get fill_expert_random values, so any
  // P gives the same model.
  void fill_weights(uint64_t seed, float scale);

  // input/output: this rank's [tau, He] bf16 device buffers; topk ids (-1 = none) / weights:
  // this rank's [tau * k] host arrays. Returns when the invocation's GPU work is enqueued
  // (after the count exchange) ; stats are this rank's view.
  LayerInvocationStats forward(const void* input, std::span<const int32_t> topk_ids,
                               std::span<const float> topk_weights, bool balance, void* output);
  // Waits for the last invocation and returns its timings. A READY failure was handled (see
  // above); any other device-side failure the runtime reports throws iser::Error.
  EpLayerTimings finish();
  // Fault injection (tests): `hook` is called with the COPY stream right before each
  // replication is enqueued (e.g. to stall it); an empty function removes it.
  void set_copy_hook(std::function<void(Stream)> hook);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// RuntimeConfig for this layer (one layer, one helper bank, S helper slots).
RuntimeConfig ep_runtime_config(const LayerConfig& config);

}  // namespace iser::moe
