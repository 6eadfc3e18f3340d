// Shared helpers of the runtime GPU tests: deterministic bundles, poisoned banks, random copy
// lists and a host-view of one rank's control words.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "gpu/gpu_test_util.h"
#include "iser/error.h"
#include "iser/runtime.h"
#include "runtime/layout.h"

namespace iser::testing {

inline constexpr uint8_t kPoison = 0xA5;

#define ISER_EXPECT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Bytes of home bundle (rank, layer, home_idx): every rank can compute every other's.
inline std::vector<uint8_t> bundle_pattern(const RuntimeConfig& c, int rank, int layer,
                                           int home_idx) {
  std::vector<uint8_t> bytes(static_cast<size_t>(c.bundle.bytes()));
  uint64_t x = 0x9E3779B97F4A7C15ull * (1 + rank * 131 + layer * 7919 + home_idx * 104729);
  for (size_t i = 0; i < bytes.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (size_t b = 0; b < 8 && i + b < bytes.size(); ++b) {
      bytes[i + b] = static_cast<uint8_t>(x >> (8 * b));
      if (bytes[i + b] == kPoison) bytes[i + b] = 0x5A;  // a poisoned byte is never "correct"
    }
  }
  return bytes;
}

inline void fill_homes(Runtime& rt) {
  const RuntimeConfig& c = rt.config();
  for (int i = 0; i < rt.num_local_ranks(); ++i) {
    for (int layer = 0; layer < c.num_layers; ++layer) {
      for (int h = 0; h < c.experts_per_rank(); ++h) {
        const auto bytes = bundle_pattern(c, rt.first_rank() + i, layer, h);
        ASSERT_EQ(cudaMemcpy(rt.home_bundle(i, layer, h), bytes.data(), bytes.size(),
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
    }
  }
  // A pageable cudaMemcpy may return before its DMA lands; the tests' streams are non-blocking.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

inline void poison_helpers(Runtime& rt) {
  const RuntimeConfig& c = rt.config();
  if (c.num_slots == 0) return;
  for (int i = 0; i < rt.num_local_ranks(); ++i) {
    const size_t bytes = static_cast<size_t>(c.num_banks) * c.num_slots * c.bundle.slot_stride();
    ASSERT_EQ(cudaMemset(rt.helper_slot(i, 0, 0), kPoison, bytes), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

inline std::vector<uint8_t> read_device(const void* ptr, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  EXPECT_EQ(cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// Helper slot (bank) of every local rank must hold its op's owner bundle in [0, bundle bytes)
// and poison after it; untargeted slots must be all poison.
inline void expect_bank(Runtime& rt, const std::vector<CopyOp>& ops, int layer, int bank,
                        const char* what) {
  const RuntimeConfig& c = rt.config();
  const int h = c.experts_per_rank();
  const size_t stride = static_cast<size_t>(c.bundle.slot_stride());
  const size_t bundle = static_cast<size_t>(c.bundle.bytes());
  for (int i = 0; i < rt.num_local_ranks(); ++i) {
    const int rank = rt.first_rank() + i;
    for (int slot = 0; slot < c.num_slots; ++slot) {
      const CopyOp* target = nullptr;
      for (const CopyOp& op : ops) {
        if (op.helper == slot && rank >= op.group_begin && rank < op.group_begin + op.group_size) {
          target = &op;
        }
      }
      const auto got = read_device(rt.helper_slot(i, bank, slot), stride);
      std::vector<uint8_t> want(stride, kPoison);
      if (target) {
        const auto src = bundle_pattern(c, target->owner, layer, target->expert % h);
        std::copy(src.begin(), src.end(), want.begin());
      }
      size_t first_bad = stride;
      for (size_t b = 0; b < stride; ++b) {
        if (got[b] != want[b]) {
          first_bad = b;
          break;
        }
      }
      EXPECT_EQ(first_bad, stride) << what << ": rank " << rank << " helper " << slot << " bank "
                                   << bank << (target ? " (replica)" : " (untouched)")
                                   << " differs at byte " << first_bad << " of " << bundle;
    }
  }
}

// Home bundles of every local rank still hold their pattern (replication only reads them).
inline void expect_homes_intact(Runtime& rt) {
  const RuntimeConfig& c = rt.config();
  for (int i = 0; i < rt.num_local_ranks(); ++i) {
    for (int layer = 0; layer < c.num_layers; ++layer) {
      for (int h = 0; h < c.experts_per_rank(); ++h) {
        const auto want = bundle_pattern(c, rt.first_rank() + i, layer, h);
        EXPECT_EQ(read_device(rt.home_bundle(i, layer, h), want.size()), want)
            << "home bundle " << h << " of rank " << rt.first_rank() + i << " layer " << layer;
      }
    }
  }
}

// Copy shapes every replica test runs: the default bulk pipeline, one stage (no lag), one stage
// per warp on 16 warps, deep stages, registers.
struct TestCopyShape {
  CopyPath path;
  int warps;
  int stages;
  std::string name() const {
    return std::string(to_string(path)) + " " + std::to_string(warps) + "x" +
           std::to_string(stages);
  }
};
inline constexpr TestCopyShape kTestCopyShapes[] = {{CopyPath::kBulk, 0, 0},
                                                    {CopyPath::kBulk, 1, 1},
                                                    {CopyPath::kBulk, 16, 1},
                                                    {CopyPath::kBulk, 2, 11},
                                                    {CopyPath::kRegisters, 0, 0}};

// Random copy list: groups from aligned levels (sizes P, P/2, ..., 1), helpers colored smallest
// free, experts anywhere (owners inside or outside their group), modes mixed.
inline std::vector<CopyOp> random_ops(const RuntimeConfig& c, std::mt19937& rng, int attempts) {
  std::vector<CopyOp> ops;
  std::vector<std::vector<char>> used(c.num_ranks, std::vector<char>(c.num_slots, 0));
  int num_levels = 0;
  while ((c.num_ranks >> num_levels) >= 1 && c.num_ranks % (1 << num_levels) == 0) ++num_levels;
  for (int a = 0; a < attempts; ++a) {
    const int level = static_cast<int>(rng() % num_levels);
    const int g = c.num_ranks >> level;
    const int begin = static_cast<int>(rng() % (1u << level)) * g;
    int helper = -1;
    for (int s = 0; s < c.num_slots && helper < 0; ++s) {
      bool free = true;
      for (int m = begin; m < begin + g; ++m) free = free && !used[m][s];
      if (free) helper = s;
    }
    if (helper < 0) continue;
    for (int m = begin; m < begin + g; ++m) used[m][helper] = 1;
    CopyOp op;
    op.expert = static_cast<int>(rng() % c.num_experts);
    op.owner = op.expert / c.experts_per_rank();
    op.group_begin = begin;
    op.group_size = g;
    op.helper = helper;
    op.mode = rng() % 2 == 1 ? TransportMode::kSami : TransportMode::kOwnerDirect;
    ops.push_back(op);
  }
  return ops;
}

// Control words of rank r as seen in its own region.
inline std::vector<uint64_t> read_flags(const Runtime& rt, int rank, int64_t offset) {
  std::vector<uint64_t> out(rt.config().num_ranks);
  EXPECT_EQ(cudaMemcpy(out.data(), static_cast<const char*>(rt.peer_base(rank)) + offset,
                       out.size() * 8, cudaMemcpyDeviceToHost),
            cudaSuccess);
  return out;
}

// RAII device buffer.
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, sizeof(T) * (n ? n : 1)) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceVector(const std::vector<T>& host) : DeviceVector(host.size()) { upload(host); }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    EXPECT_LE(host.size(), n_);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    // Landed before a non-blocking stream's kernel reads it (the copy may return before its DMA).
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, sizeof(T) * n_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// Expected READY-gate output: expert per (rank, helper) of every op, -1 elsewhere.
inline std::vector<int32_t> expected_slot_expert(const RuntimeConfig& c,
                                                 const std::vector<CopyOp>& ops) {
  std::vector<int32_t> out(static_cast<size_t>(c.num_ranks) * c.num_slots, -1);
  for (const CopyOp& op : ops) {
    for (int m = op.group_begin; m < op.group_begin + op.group_size; ++m) {
      out[static_cast<size_t>(m) * c.num_slots + op.helper] = op.expert;
    }
  }
  return out;
}

// Captures `times` calls of enqueue() on `stream` as one CUDA graph, launches it once and waits.
template <typename Enqueue>
void launch_as_graph(cudaStream_t stream, int times, Enqueue&& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ISER_EXPECT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < times; ++i) enqueue();
  ISER_EXPECT_CUDA(cudaStreamEndCapture(stream, &graph));
  ISER_EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  ISER_EXPECT_CUDA(cudaGraphLaunch(exec, stream));
  ISER_EXPECT_CUDA(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Test-only stall: a kernel that spins until *flag != 0 (host-mapped) or timeout_ns passed.
cudaError_t launch_stall(const volatile int* device_flag, uint64_t timeout_ns, cudaStream_t stream);
// Loads the stall kernel now: a first launch beside a spinning kernel waits for it (see
// stress_kernels.h).
cudaError_t preload_stall_kernel();

// A host-released stall (mapped host flag) in front of a stream: hold() launches the stall kernel,
// release() lets every held stream go on; a stall never released ends after its timeout.
class Stall {
 public:
  Stall() {
    EXPECT_EQ(cudaHostAlloc(&host_, sizeof(int), cudaHostAllocMapped), cudaSuccess);
    *host_ = 0;
    EXPECT_EQ(cudaHostGetDevicePointer(&device_, host_, 0), cudaSuccess);
  }
  ~Stall() { cudaFreeHost(host_); }
  Stall(const Stall&) = delete;
  Stall& operator=(const Stall&) = delete;
  void hold(cudaStream_t stream, uint64_t timeout_ns = 10'000'000'000ull) {
    EXPECT_EQ(launch_stall(device_, timeout_ns, stream), cudaSuccess);
  }
  void release() { *reinterpret_cast<volatile int*>(host_) = 1; }

 private:
  int* host_ = nullptr;
  int* device_ = nullptr;
};

}  // namespace iser::testing
