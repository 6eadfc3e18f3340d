// Reference EP MoE layer, one process per GPU (docs/design.md §9-§10), on the replication runtime.
//
// One invocation on rank r, with two streams:
//   MAIN  shared expert  ->  dispatch (NCCL send/recv by destination slot rank)  ->  home-slot
//         GEMMs  ->  READY gate  ->  helper-slot GEMMs  ->  bank release  ->  combine (NCCL
//         send/recv back, then shared + sum_j w_j y_j in fixed order)
//   COPY  (highest priority) count exchange  ->  plan  ->  replicate
// MAIN never waits for COPY except at the READY gate, and only helper work sits behind it.
// Two planners (EpLayerOptions::planner, docs/moe.md has the stream/event diagrams):
//  - host (default): the host reads the exchanged counts back, plans with the policy (the CPU
//    reference planner), builds and uploads the copy list, then enqueues the replication.
//  - gpu: the GPU planner (include/iser/gpu_planner.h, HALO-Q family only) plans on the COPY
//    stream right after the count exchange, a kernel turns the plan into the copy list and the
//    replication follows with no host round trip; MAIN waits only for the `plan ready` event.
// In both, the host needs the counts and the plan to build the routing maps: NCCL's send/recv
// sizes are host values. In gpu mode it reads them back (one pinned copy on a third stream after
// the plan event), decodes the plan, validates it and checks the device copy list against it; a
// plan that fails (a GPU status bit, an invalid plan, a copy-list mismatch) is logged and the
// invocation runs unbalanced (home slots only; the output is unchanged). forward()
// synchronizes the host with that read-back once, so the invocation is not capturable in a
// CUDA graph as a whole (its expert GEMMs and kernels are; see GroupedMlp). GraphEpMoeLayer
// (iser/moe_ep_graph.h) is the capturable static-shape form for decode-size batches.
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
#include <string_view>

#include "iser/moe.h"
#include "iser/moe_layer.h"
#include "iser/runtime.h"

namespace iser::moe {

struct EpLayerTimings {
  float layer_ms = 0;         // MAIN: invocation start -> combine done
  float shared_ms = 0;        // MAIN: shared expert
  float copy_ms = 0;          // COPY: replicate kernel (0 when OFF)
  float ready_wait_ms = 0;    // MAIN: READY gate, i.e. the exposed part of the copy (0 when OFF)
  double counts_wait_us = 0;  // host: waiting for the count exchange (gpu planner: and plan)
  double plan_us = 0;     // host: plan, copy list and routing maps (gpu planner: read-back decode,
                          // validation and routing maps)
  float gpu_plan_ms = 0;  // COPY: GPU planner + copy-list kernels (gpu planner, ON only)
  uint32_t fallback_slots = 0;  // helper slots refilled from home bundles after a READY failure
  bool plan_rejected = false;   // gpu planner: the plan failed its checks; ran unbalanced
};

// Who plans an ON invocation (see above).
// kAuto resolves at construction: kGpu where the GPU planner covers the policy and the shape
// (gpu_planner_covers), else kHost.
enum class PlannerKind : uint8_t { kHost = 0, kGpu = 1, kAuto = 2 };
std::string_view to_string(PlannerKind planner);
PlannerKind planner_from_string(std::string_view name);  // "host" | "gpu" | "auto", else Error

struct EpLayerOptions {
  // kAuto (default): the GPU planner on the COPY stream (no host round trip before the
  // replication) where it covers the policy and the shape, the CPU reference planner elsewhere.
  // kGpu insists on the GPU planner (iser::Error where it cannot); kHost always plans on the CPU.
  PlannerKind planner = PlannerKind::kAuto;
};

class EpMoeLayer {
 public:
  // runtime: one rank per process (num_local_ranks() == 1), one layer, one helper bank
  // (check_ep_runtime_config), bundles of shape.bundle_bytes() weight bytes and no scales. comm:
  // the NCCL communicator of the same P ranks for dispatch/combine (not used by the runtime after
  // set-up). options.planner = kGpu needs a policy the GPU planner covers (gpu_planner_options) and
  // tau * k <= kGpuMaxRoutesPerRank; else iser::Error.
  EpMoeLayer(const LayerConfig& config, Runtime& runtime, ncclComm* comm,
             const EpLayerOptions& options = {});
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
  // above); any other device-side failure the runtime reports throws iser::Error, and so does a
  // finish() after a forward() that threw. A forward() that threw leaves the layer usable: the
  // next forward() releases the helper bank of a replication it had already enqueued.
  EpLayerTimings finish();
  // The planner in use (kAuto resolved): kGpu or kHost.
  PlannerKind planner() const;

 private:
  friend struct ::iser::testing::Access;  // include/iser/testing/hooks.h: the hooks below
  // Fault injection (tests): `hook` is called with the COPY stream right before each
  // replication is enqueued (e.g. to stall it); an empty function removes it.
  void set_copy_hook(std::function<void(Stream)> hook);
  // Fault injection (tests, gpu planner): `hook` is called with the COPY stream and the device
  // plan words (GpuPlanLayout) right after the GPU planner wrote them, before the copy list is
  // derived and the plan read back (e.g. to corrupt its status word); empty removes it.
  void set_plan_hook(std::function<void(Stream, int32_t* plan_words)> hook);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// RuntimeConfig for this layer (one layer, one helper bank, S helper slots).
RuntimeConfig ep_runtime_config(const LayerConfig& config);
// Throws iser::Error (prefixed with `layer`) unless `have` fits the layer: ep_runtime_config's
// P, E, S and bundle, at least one layer, and exactly one helper bank (both EP layers bind their
// helper GEMMs to the slots of bank 0).
void check_ep_runtime_config(const LayerConfig& config, const RuntimeConfig& have,
                             std::string_view layer);
// The H + S slot weights of a layer on `runtime` (ep_runtime_config): its home bundles, then the
// helper slots of bank 0, each bundle w13 then w2 (EpMoeLayer::fill_weights).
std::vector<SlotWeights> ep_slot_weights(const LayerConfig& config, Runtime& runtime);
// fill_weights of both EP layers: rank `rank`'s home bundles on `runtime` (global ids r*H + h)
// and the shared expert (id E) get fill_expert_random values; synchronizes `stream`.
void fill_ep_weights(const LayerConfig& config, Runtime& runtime, int rank, ExpertBank& shared,
                     uint64_t seed, float scale, Stream stream);

}  // namespace iser::moe
