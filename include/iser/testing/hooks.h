// Testing-only interface: fault injection and per-rank launches of logical ranks, for iser's own
// GPU tests and the Python package's fault tests. Not part of the public API: it is not
// installed, and it may change with any release.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "iser/moe_ep_graph.h"
#include "iser/moe_ep_layer.h"
#include "iser/runtime.h"
#include "iser/slot_balancer.h"

namespace iser::testing {

// The one friend of the classes whose testing calls are private (see each declaration there).
struct Access {
  static void exchange_counts_ranks(Runtime& runtime, int local_begin, int local_end,
                                    const int32_t* rows, int32_t* matrix, uint64_t epoch,
                                    StreamHandle stream) {
    runtime.exchange_counts_ranks(local_begin, local_end, rows, matrix, epoch, stream);
  }
  static void replicate_ranks(Runtime& runtime, int local_begin, int local_end, const CopyOp* ops,
                              int num_ops, int layer, uint64_t generation, Transport transport,
                              StreamHandle stream, int num_sms) {
    runtime.replicate_ranks(local_begin, local_end, ops, num_ops, layer, generation, transport,
                            stream, num_sms);
  }
  static void set_copy_hook(moe::EpMoeLayer& layer, std::function<void(moe::Stream)> hook) {
    layer.set_copy_hook(std::move(hook));
  }
  static void set_plan_hook(moe::EpMoeLayer& layer,
                            std::function<void(moe::Stream, int32_t*)> hook) {
    layer.set_plan_hook(std::move(hook));
  }
  static void set_copy_hook(moe::GraphEpMoeLayer& layer, std::function<void(moe::Stream)> hook) {
    layer.set_copy_hook(std::move(hook));
  }
  static void set_fault_stream(SlotBalancer& balancer, int local_idx, StreamHandle stream) {
    balancer.set_fault_stream(local_idx, stream);
  }
};

// Runtime (logical mode only): the count exchange of local ranks [local_begin, local_end).
inline void exchange_counts_ranks(Runtime& runtime, int local_begin, int local_end,
                                  const int32_t* rows, int32_t* matrix, uint64_t epoch,
                                  StreamHandle stream) {
  Access::exchange_counts_ranks(runtime, local_begin, local_end, rows, matrix, epoch, stream);
}
// Runtime (logical mode only): replicate for local ranks [local_begin, local_end).
inline void replicate_ranks(Runtime& runtime, int local_begin, int local_end, const CopyOp* ops,
                            int num_ops, int layer, uint64_t generation, Transport transport,
                            StreamHandle stream, int num_sms = 0) {
  Access::replicate_ranks(runtime, local_begin, local_end, ops, num_ops, layer, generation,
                          transport, stream, num_sms);
}
inline void set_copy_hook(moe::EpMoeLayer& layer, std::function<void(moe::Stream)> hook) {
  Access::set_copy_hook(layer, std::move(hook));
}
inline void set_plan_hook(moe::EpMoeLayer& layer,
                          std::function<void(moe::Stream, int32_t* plan_words)> hook) {
  Access::set_plan_hook(layer, std::move(hook));
}
inline void set_copy_hook(moe::GraphEpMoeLayer& layer, std::function<void(moe::Stream)> hook) {
  Access::set_copy_hook(layer, std::move(hook));
}
inline void set_fault_stream(SlotBalancer& balancer, int local_idx, StreamHandle stream) {
  Access::set_fault_stream(balancer, local_idx, stream);
}

}  // namespace iser::testing
