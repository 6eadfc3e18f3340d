// torch.classes.iser.SlotBalancer: the slot balancer (include/iser/slot_balancer.h) on CUDA
// tensors and torch's current stream. python/iser/torch/balancer.py wraps it.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "iser/runtime.h"
#include "iser/slot_balancer.h"
#include "iser/testing/hooks.h"

namespace iser::torch_ops {
namespace {

class TorchSlotBalancer : public torch::CustomClassHolder {
 public:
  // rank < 0: all num_ranks ranks on the current device (logical); else this process's rank of
  // an NCCL communicator bootstrapped from `unique_id` (Communicator::new_unique_id_hex()).
  TorchSlotBalancer(int64_t num_ranks, int64_t num_experts, int64_t num_slots, std::string policy,
                    std::string transport, int64_t copy_sms, int64_t max_tokens, int64_t top_k,
                    int64_t timeout_us, std::vector<int64_t> field_bytes, int64_t rank,
                    std::string unique_id) {
    SlotBalancerConfig c;
    c.num_ranks = static_cast<int>(num_ranks);
    c.num_experts = static_cast<int>(num_experts);
    c.num_slots = static_cast<int>(num_slots);
    c.policy = std::move(policy);
    c.transport = transport_from_string(transport);
    c.copy_sms = static_cast<int>(copy_sms);
    c.max_tokens = static_cast<int>(max_tokens);
    c.top_k = static_cast<int>(top_k);
    c.timeout_us = timeout_us;
    c.field_bytes = std::move(field_bytes);
    device_ = at::cuda::current_device();
    if (rank < 0) {
      balancer_ = SlotBalancer::logical(c);
    } else {
      comm_ = std::make_unique<Communicator>(Communicator::from_unique_id_hex(
          unique_id, static_cast<int>(rank), static_cast<int>(num_ranks)));
      balancer_ = std::make_unique<SlotBalancer>(c, *comm_);
    }
  }
  ~TorchSlotBalancer() override {
    balancer_.reset();  // before the communicator it borrows
    comm_.reset();
  }

  int64_t num_local_ranks() const { return balancer_->num_local_ranks(); }
  int64_t first_rank() const { return balancer_->first_rank(); }
  int64_t plan_words() const { return balancer_->plan_layout().total_words(); }
  std::string describe() const { return balancer_->runtime().describe(); }

  // Field f of every local rank's H + S slots as bytes: [num_local, H + S, field_bytes[f]]. The
  // memory is the balancer's; the tensor holds a reference to it.
  at::Tensor field(int64_t f) const {
    const SlotBalancerConfig& c = balancer_->config();
    TORCH_CHECK(f >= 0 && f < static_cast<int64_t>(c.field_bytes.size()), "iser: field ", f,
                " not in [0, ", c.field_bytes.size(), ")");
    auto* base = static_cast<uint8_t*>(balancer_->slots(0)) + balancer_->field_offset(f);
    const int64_t slots = c.experts_per_rank() + c.num_slots;
    return at::from_blob(base, {num_local_ranks(), slots, c.field_bytes[f]},
                         {balancer_->region_bytes(), balancer_->slot_stride(), 1}, keep_alive(),
                         at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device_));
  }

  // ids int32 [num_local, num_tokens, top_k] on the device -> global slot ids (same shape).
  at::Tensor route(const at::Tensor& topk_ids) {
    TORCH_CHECK(topk_ids.is_cuda() && topk_ids.get_device() == device_,
                "iser: topk_ids must be on cuda:", device_, ", got ", topk_ids.device());
    TORCH_CHECK(topk_ids.dim() == 3 && topk_ids.size(0) == num_local_ranks(),
                "iser: topk_ids must be [", num_local_ranks(), ", num_tokens, top_k], got shape ",
                topk_ids.sizes());
    const c10::cuda::CUDAGuard guard(device_);
    // NOTE: the copy stream reads the ids after this call returns; holding them until the next
    // route() keeps their memory from the allocator until the caller's stream has waited for
    // the plan (which follows the last read).
    ids_ = topk_ids.to(at::kInt).contiguous();
    at::Tensor slot_ids = at::empty_like(ids_);
    balancer_->route(ids_.data_ptr<int32_t>(), static_cast<int>(ids_.size(1)),
                     static_cast<int>(ids_.size(2)), slot_ids.data_ptr<int32_t>(), stream());
    return slot_ids;
  }
  void replicate() {
    const c10::cuda::CUDAGuard guard(device_);
    balancer_->replicate();
  }
  void ready() {
    const c10::cuda::CUDAGuard guard(device_);
    balancer_->ready(stream());
  }
  void release() {
    const c10::cuda::CUDAGuard guard(device_);
    balancer_->release(stream());
  }
  void set_fault_stream(int64_t local_idx, int64_t stream) {
    iser::testing::set_fault_stream(*balancer_, static_cast<int>(local_idx),
                                    reinterpret_cast<cudaStream_t>(stream));
  }
  int64_t copy_stream() const { return reinterpret_cast<int64_t>(balancer_->copy_stream()); }

  // Views of the last route()'s plan words and local rank 0's count matrix [P, E].
  at::Tensor plan() const {
    return at::from_blob(const_cast<int32_t*>(balancer_->plan()), {plan_words()}, {1}, keep_alive(),
                         at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device_));
  }
  at::Tensor counts() const {
    const SlotBalancerConfig& c = balancer_->config();
    return at::from_blob(const_cast<int32_t*>(balancer_->count_matrix()),
                         {c.num_ranks, c.num_experts}, {c.num_experts, 1}, keep_alive(),
                         at::TensorOptions().dtype(at::kInt).device(at::kCUDA, device_));
  }

  c10::Dict<std::string, int64_t> stats() {
    const c10::cuda::CUDAGuard guard(device_);
    const SlotBalancerStats s = balancer_->stats();
    c10::Dict<std::string, int64_t> out;
    out.insert("fallback_slots", static_cast<int64_t>(s.fallback_slots));
    out.insert("ready_failures", static_cast<int64_t>(s.ready_failures));
    out.insert("planner_errors", s.planner_errors);
    out.insert("plan_status", s.plan_status);
    out.insert("num_ops", s.num_ops);
    return out;
  }

 private:
  // A deleter that holds a reference to this balancer (views keep its memory alive).
  std::function<void(void*)> keep_alive() const {
    auto self = c10::intrusive_ptr<TorchSlotBalancer>::unsafe_reclaim_from_nonowning(
        const_cast<TorchSlotBalancer*>(this));
    return [self](void*) {};
  }
  cudaStream_t stream() const { return at::cuda::getCurrentCUDAStream(device_).stream(); }

  int device_ = 0;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<SlotBalancer> balancer_;
  at::Tensor ids_;
};

std::string nccl_unique_id() {
  return Communicator::new_unique_id_hex();
}

// Collective over the ranks that share `unique_id`: bootstraps a communicator, sets up a minimal
// runtime (one expert and one helper slot of 4 KiB per rank) and returns Runtime::describe():
// which peer memory iser chooses for these ranks, and why multicast is (un)available.
std::string peer_memory_report(int64_t num_ranks, int64_t rank, std::string unique_id,
                               std::string peer_memory, bool multicast) {
  RuntimeConfig c;
  c.num_ranks = static_cast<int>(num_ranks);
  c.num_experts = static_cast<int>(num_ranks);
  c.num_slots = 1;
  c.bundle = {4096, 0};
  c.peer_memory = peer_memory_from_string(peer_memory);
  c.multicast = multicast;
  Communicator comm = Communicator::from_unique_id_hex(unique_id, static_cast<int>(rank),
                                                       static_cast<int>(num_ranks));
  const Runtime rt(c, comm);
  return rt.describe();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(iser, m) {
  m.class_<TorchSlotBalancer>("SlotBalancer")
      .def(torch::init<int64_t, int64_t, int64_t, std::string, std::string, int64_t, int64_t,
                       int64_t, int64_t, std::vector<int64_t>, int64_t, std::string>())
      .def("num_local_ranks", &TorchSlotBalancer::num_local_ranks)
      .def("first_rank", &TorchSlotBalancer::first_rank)
      .def("plan_words", &TorchSlotBalancer::plan_words)
      .def("describe", &TorchSlotBalancer::describe)
      .def("field", &TorchSlotBalancer::field)
      .def("route", &TorchSlotBalancer::route)
      .def("replicate", &TorchSlotBalancer::replicate)
      .def("ready", &TorchSlotBalancer::ready)
      .def("release", &TorchSlotBalancer::release)
      .def("copy_stream", &TorchSlotBalancer::copy_stream)
      .def("set_fault_stream", &TorchSlotBalancer::set_fault_stream)
      .def("plan", &TorchSlotBalancer::plan)
      .def("counts", &TorchSlotBalancer::counts)
      .def("stats", &TorchSlotBalancer::stats);
  m.def("nccl_unique_id() -> str", &nccl_unique_id);
  m.def(
      "peer_memory_report(int num_ranks, int rank, str unique_id, str peer_memory, bool "
      "multicast) -> str",
      &peer_memory_report);
}

}  // namespace iser::torch_ops
