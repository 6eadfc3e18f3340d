// An event for ordering only: no timing, capturable as a CUDA-graph dependency between streams.
#pragma once

#include <cuda_runtime.h>

#include "iser/error.h"

namespace iser::moe {

class OrderEvent {
 public:
  OrderEvent() { ISER_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~OrderEvent() { cudaEventDestroy(event_); }
  OrderEvent(const OrderEvent&) = delete;
  OrderEvent& operator=(const OrderEvent&) = delete;
  void record(cudaStream_t stream) { ISER_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void wait(cudaStream_t stream) const { ISER_CUDA_CHECK(cudaStreamWaitEvent(stream, event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace iser::moe
