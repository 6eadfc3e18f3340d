// Replication benchmark (docs/design.md §11), nccl-tests style. One process per GPU: the binary
// re-executes itself once per rank (-g ranks) with a file-based NCCL unique id. Owner rank 0
// replicates bundles into helper slots, with the owner outside the group (group {1..P-1}: the
// pure NVLink transfer) and/or inside it (group {0..P-1}: every rank, the owner too, receives a
// replica; under p2p-sami every member moves its 1/P of the slices, so all GPUs' SMs drive the
// owner's outgoing links). Every transport is measured in the same run:
//   p2p-direct / p2p-sami / p2p-sami-owner (SM copies, 1..16 SMs per GPU; p2p-sami-owner with
//   the owner outside: the owner pushes every (g+1)-th slice, the members pull the rest),
//   p2p-sami-host (p2p-sami-owner for the head of each bundle, the tail (-H share) through pinned
//   host memory over both GPUs' PCIe links on -L extra CTAs per GPU; sms = copy + host CTAs),
//   copy-engine (cudaMemcpyAsync), and ncclBroadcast tuned over protocol x channel count x
//   CUDA-graph launch (best reported).
// Sections: bundles (1/4/8 x 37.16 MB), size sweep (-b..-e, x -f), count-exchange latency
// (P = 2 over NVLink and P logical ranks on one GPU), READY gate cost with nothing to copy.
// Flags: bench_replicate_options.h.
// Reported time: per-iteration median over -n iterations, slowest rank; algbw = bytes / time.
// Graph rows: one CUDA graph of -n iterations, launched once; time = graph time / iterations.
#include <nccl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <exception>

#include "bench_replicate_options.h"
#include "iser/runtime.h"

extern char** environ;

namespace {

using bench_replicate::has;
using bench_replicate::Options;
using bench_replicate::parse_shape;
using bench_replicate::Shape;
using iser::CopyOp;
using iser::Runtime;
using iser::RuntimeConfig;
using iser::Transport;

#define BENCH_CUDA(expr)                                                                   \
  do {                                                                                     \
    const cudaError_t e_ = (expr);                                                         \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "CUDA error %s in %s (%s:%d)\n", cudaGetErrorString(e_), #expr, \
                   __FILE__, __LINE__);                                                    \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)
#define BENCH_NCCL(expr)                                                                   \
  do {                                                                                     \
    const ncclResult_t r_ = (expr);                                                        \
    if (r_ != ncclSuccess) {                                                               \
      std::fprintf(stderr, "NCCL error %s in %s (%s:%d)\n", ncclGetErrorString(r_), #expr, \
                   __FILE__, __LINE__);                                                    \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

constexpr int64_t kPaperBundle = 37'158'912;  // 37.16 MB: one expert of the paper's model

// ---- deterministic payload -----------------------------------------------------------------

__device__ __forceinline__ uint32_t pattern_word(uint64_t idx, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(idx * 2654435761ull) ^ seed;
  x ^= x >> 16;
  x *= 0x7feb352d;
  x ^= x >> 15;
  return x;
}

__global__ void fill_kernel(uint32_t* dst, int64_t words, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = pattern_word(i, seed);
  }
}

__global__ void check_kernel(const uint32_t* got, int64_t words, uint32_t seed,
                             unsigned long long* bad) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    local += got[i] != pattern_word(i, seed);
  }
  if (local) atomicAdd(bad, local);
}

void fill(void* dst, int64_t bytes, uint32_t seed) {
  fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(dst), bytes / 4, seed);
  BENCH_CUDA(cudaGetLastError());
}

uint64_t count_bad(const void* got, int64_t bytes, uint32_t seed) {
  unsigned long long* bad = nullptr;
  BENCH_CUDA(cudaMalloc(&bad, sizeof(*bad)));
  BENCH_CUDA(cudaMemset(bad, 0, sizeof(*bad)));
  check_kernel<<<1024, 256>>>(static_cast<const uint32_t*>(got), bytes / 4, seed, bad);
  BENCH_CUDA(cudaGetLastError());
  unsigned long long host = 0;
  BENCH_CUDA(cudaMemcpy(&host, bad, sizeof(host), cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaFree(bad));
  return host;
}

// ---- ranks ---------------------------------------------------------------------------------

struct World {
  int rank = 0;
  int size = 0;
  std::unique_ptr<iser::Communicator> comm;
  cudaStream_t stream = nullptr;
  double* scratch = nullptr;
  iser::PeerMemoryMode peer_memory = iser::PeerMemoryMode::kAuto;  // -M, per pass
  bool report_peer_memory = false;  // print the next runtime's peer memory (rank 0)
};

double reduce_over_ranks(World& w, double v, ncclRedOp_t op) {
  double host = v;
  // NOTE: host -> device copies and zeroing go on w.stream (non-blocking): a cudaMemcpy on the
  // default stream may return before its DMA lands, and nothing would order w.stream after it.
  BENCH_CUDA(cudaMemcpyAsync(w.scratch, &host, sizeof(host), cudaMemcpyHostToDevice, w.stream));
  BENCH_NCCL(ncclAllReduce(w.scratch, w.scratch, 1, ncclDouble, op, w.comm->get(), w.stream));
  BENCH_CUDA(cudaStreamSynchronize(w.stream));
  BENCH_CUDA(cudaMemcpy(&host, w.scratch, sizeof(host), cudaMemcpyDeviceToHost));
  return host;
}

// Slowest rank's value (max over ranks).
double max_over_ranks(World& w, double v) {
  return reduce_over_ranks(w, v, ncclMax);
}

double sum_over_ranks(World& w, double v) {
  return reduce_over_ranks(w, v, ncclSum);
}

void barrier(World& w) {
  (void)max_over_ranks(w, 0.0);
}

// Median per-iteration time (us) of `step` on this rank; events between iterations.
template <typename Step>
double time_median_us(World& w, int warmup, int iters, Step&& step);

// One CUDA graph of `iters` x `enqueue`, launched once after a warm-up launch; time per
// iteration (slowest rank).
template <typename Enqueue>
double time_graph_us(World& w, int iters, Enqueue&& enqueue) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(w.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < iters; ++i) enqueue();
  BENCH_CUDA(cudaStreamEndCapture(w.stream, &g));
  BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
  BENCH_CUDA(cudaGraphLaunch(exec, w.stream));  // warm-up
  BENCH_CUDA(cudaStreamSynchronize(w.stream));
  barrier(w);
  const double total_us =
      time_median_us(w, 0, 1, [&](int) { BENCH_CUDA(cudaGraphLaunch(exec, w.stream)); });
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(g));
  return total_us / iters;
}

template <typename Step>
double time_median_us(World& w, int warmup, int iters, Step&& step) {
  for (int i = 0; i < warmup; ++i) step(i);
  BENCH_CUDA(cudaStreamSynchronize(w.stream));
  barrier(w);
  std::vector<cudaEvent_t> events(iters + 1);
  for (auto& e : events) BENCH_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    BENCH_CUDA(cudaEventRecord(events[i], w.stream));
    step(warmup + i);
  }
  BENCH_CUDA(cudaEventRecord(events[iters], w.stream));
  BENCH_CUDA(cudaEventSynchronize(events[iters]));
  std::vector<double> us(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
    us[i] = ms * 1000.0;
  }
  for (auto& e : events) BENCH_CUDA(cudaEventDestroy(e));
  std::sort(us.begin(), us.end());
  const double median = iters % 2 ? us[iters / 2] : 0.5 * (us[iters / 2 - 1] + us[iters / 2]);
  return max_over_ranks(w, median);
}

struct Record {
  std::string section, transport, variant;
  int sms = 0;
  int64_t bytes = 0;
  int bundles = 0;
  double time_us = 0;
  double algbw = 0;  // GB/s
  int64_t errors = -1;
  std::string group = "-";  // receivers ("{1}", "{0,1}", ...); the owner is rank 0
};

std::vector<Record> g_records;

void emit(World& w, const Record& r) {
  if (w.rank != 0) return;
  g_records.push_back(r);
  std::printf("%-9s %-12s %-7s %-26s %4d %12lld %3d %11.2f %9.2f %6s\n", r.section.c_str(),
              r.transport.c_str(), r.group.c_str(), r.variant.c_str(), r.sms,
              static_cast<long long>(r.bytes), r.bundles, r.time_us, r.algbw,
              r.errors < 0 ? "-" : std::to_string(r.errors).c_str());
  std::fflush(stdout);
}

// ---- replication runs ------------------------------------------------------------------------

// Runtime whose rank 0 owns `num_bundles` bundles of `bytes` (home k goes to helper slot k).
std::unique_ptr<Runtime> make_runtime(World& w, int64_t bytes, int num_bundles, int num_banks,
                                      double host_share) {
  RuntimeConfig c;
  c.host_share = host_share;  // staging capacity (p2p-sami-host rows lower it per row)
  c.num_ranks = w.size;
  c.num_experts = w.size * num_bundles;
  c.num_slots = num_bundles;
  c.bundle = {bytes, 0};
  c.num_banks = num_banks;
  c.timeout_us = 10'000'000;
  c.peer_memory = w.peer_memory;
  auto rt = std::make_unique<Runtime>(c, *w.comm);
  if (w.report_peer_memory && w.rank == 0) std::printf("# %s\n", rt->describe().c_str());
  w.report_peer_memory = false;
  for (int h = 0; h < num_bundles; ++h) fill(rt->home_bundle(0, 0, h), bytes, 1000 * w.rank + h);
  BENCH_CUDA(cudaDeviceSynchronize());
  return rt;
}

// The receivers of owner rank 0's bundles: ranks 1..P-1 ("out" and "split": owner outside the
// group) or 0..P-1 ("in": the owner is a member and also fills its own helper slot).
struct Group {
  int begin = 0;
  int size = 0;
  bool contains(int rank) const { return rank >= begin && rank < begin + size; }
};

Group group_of(const std::string& owner, int num_ranks) {
  return owner == "in" ? Group{0, num_ranks} : Group{1, num_ranks - 1};
}

std::string group_text(const Group& g) {
  if (g.size == 1) return "{" + std::to_string(g.begin) + "}";
  if (g.size == 2) return "{" + std::to_string(g.begin) + "," + std::to_string(g.begin + 1) + "}";
  return "{" + std::to_string(g.begin) + ".." + std::to_string(g.begin + g.size - 1) + "}";
}

// mode < 0: alternate, owner-direct for even bundles and SAMI for odd ones ("split").
std::vector<CopyOp> owner0_to_group(int num_bundles, const Group& g, int mode) {
  std::vector<CopyOp> ops;
  for (int k = 0; k < num_bundles; ++k) {
    const iser::TransportMode op_mode =
        mode >= 0 ? static_cast<iser::TransportMode>(mode)
                  : (k % 2 ? iser::TransportMode::kSami : iser::TransportMode::kOwnerDirect);
    ops.push_back({k, 0, g.begin, g.size, k, op_mode});
  }
  return ops;
}

// Replicas in the bank of the last generation on every member (the owner too when it is one),
// compared with the owner's pattern; total over ranks.
int64_t check_replicas(World& w, Runtime& rt, const Group& g, int num_bundles, int64_t bytes) {
  double bad = 0;
  if (g.contains(w.rank)) {
    const int bank = rt.bank_of(rt.last_generation(0));
    for (int k = 0; k < num_bundles; ++k) {
      bad += static_cast<double>(count_bad(rt.helper_slot(0, bank, k), bytes, k));
    }
  }
  return static_cast<int64_t>(sum_over_ranks(w, bad));
}

void clear_banks(World& w, Runtime& rt) {
  const RuntimeConfig& c = rt.config();
  BENCH_CUDA(
      cudaMemset(rt.helper_slot(0, 0, 0), 0, c.bundle.slot_stride() * c.num_slots * c.num_banks));
  BENCH_CUDA(cudaDeviceSynchronize());
  barrier(w);
}

// One transport: copy-engine (explicit generations: the host picks the banks), or an SM
// transport with device generations (kDeviceGeneration), eager and as one CUDA graph, per copy
// shape and SM count. `finish` checks the replicas and prints each row.
template <typename Finish>
void run_transport(World& w, const Options& o, Runtime& rt, const std::string& section,
                   int64_t bytes, int num_bundles, const std::string& name,
                   const std::vector<CopyOp>& ops, CopyOp* device_ops, Finish&& finish) {
  const int64_t total = bytes * num_bundles;
  const Transport t = iser::transport_from_string(name);
  BENCH_CUDA(cudaMemcpyAsync(device_ops, ops.data(), sizeof(CopyOp) * ops.size(),
                             cudaMemcpyHostToDevice, w.stream));
  if (t == Transport::kCopyEngine) {
    clear_banks(w, rt);
    uint64_t generation = rt.last_generation(0);
    const double us = time_median_us(w, o.warmup, o.iters, [&](int) {
      ++generation;
      rt.replicate_copy_engine(ops, 0, generation, w.stream);
      rt.release_bank(generation, w.stream);
    });
    finish(Record{section, name, "", 0, total, num_bundles, us, total / us / 1e3});
    return;
  }
  auto step = [&](int sms) {
    rt.replicate(device_ops, num_bundles, 0, iser::kDeviceGeneration, t, w.stream, sms);
    rt.release_bank(iser::kDeviceGeneration, w.stream);
  };
  for (const std::string& shape_text : o.shapes) {
    const Shape shape = parse_shape(shape_text);
    rt.set_copy_shape(shape.path, shape.warps, shape.stages);
    for (int sms : o.sms) {
      clear_banks(w, rt);
      const double us = time_median_us(w, o.warmup, o.iters, [&](int) { step(sms); });
      finish(Record{section, name, shape_text + "/eager", sms, total, num_bundles, us,
                    total / us / 1e3});
      if (!o.graph) continue;
      clear_banks(w, rt);
      const double graph_us = time_graph_us(w, o.iters, [&] { step(sms); });
      finish(Record{section, name, shape_text + "/graph", sms, total, num_bundles, graph_us,
                    total / graph_us / 1e3});
    }
  }
}

// Every transport but NCCL, for each owner placement (-O): rows labelled with the group.
void run_runtime_transports(World& w, const Options& o, const std::string& section, int64_t bytes,
                            int num_bundles) {
  const double max_share = has(o.transports, "p2p-sami-host")
                               ? *std::max_element(o.host_shares.begin(), o.host_shares.end())
                               : 0.0;
  auto rt = make_runtime(w, bytes, num_bundles, o.banks, max_share);
  CopyOp* device_ops = nullptr;
  BENCH_CUDA(cudaMalloc(&device_ops, sizeof(CopyOp) * num_bundles));
  for (const std::string& owner : o.owners) {
    const Group group = group_of(owner, w.size);
    auto finish = [&](Record r) {
      BENCH_CUDA(cudaStreamSynchronize(w.stream));
      rt->check_status();
      r.errors = o.check ? check_replicas(w, *rt, group, num_bundles, bytes) : -1;
      r.group = group_text(group);
      emit(w, r);
    };
    if (owner == "split") {  // the op modes carry the split: only `plan` keeps them
      if (num_bundles >= 2) {
        run_transport(w, o, *rt, section, bytes, num_bundles, "plan",
                      owner0_to_group(num_bundles, group, -1), device_ops, finish);
      }
      continue;
    }
    for (const std::string& name : o.transports) {
      if (name == "nccl") continue;
      const int mode = static_cast<int>(name == "p2p-sami" ? iser::TransportMode::kSami
                                        : name == "p2p-sami-owner" || name == "p2p-sami-host"
                                            ? iser::TransportMode::kSamiOwner
                                            : iser::TransportMode::kOwnerDirect);
      const std::vector<CopyOp> ops = owner0_to_group(num_bundles, group, mode);
      if (name != "p2p-sami-host") {
        run_transport(w, o, *rt, section, bytes, num_bundles, name, ops, device_ops, finish);
        continue;
      }
      // One row per (host share, host-lane CTAs): the variant names both, sms counts both lanes.
      for (const std::string& path : o.host_paths) {
        const bool registers = path == "registers";
        rt->set_host_path(registers ? iser::CopyPath::kRegisters : iser::CopyPath::kBulk);
        for (double share : o.host_shares) {
          for (int host_sms : o.host_sms) {
            rt->set_host_share(share, host_sms);
            char tag[64];
            std::snprintf(tag, sizeof(tag), "/H%.3g+%d%s", share, host_sms,
                          registers ? "/reg" : "");
            run_transport(w, o, *rt, section, bytes, num_bundles, name, ops, device_ops,
                          [&](Record r) {
                            r.variant += tag;
                            r.sms += host_sms;
                            finish(r);
                          });
          }
        }
      }
    }
  }
  BENCH_CUDA(cudaFree(device_ops));
}

// ncclBroadcast of `total` bytes from rank 0 (in place: the root keeps its buffer, every other
// rank receives it), tuned: protocol x channels (one communicator each) x eager/graph launch.
// Reports every variant and the best.
struct NcclVariant {
  std::string proto;
  int channels = 0;
  ncclComm_t comm = nullptr;
};

std::vector<NcclVariant> make_nccl_variants(World& w) {
  std::vector<NcclVariant> variants;
  for (const char* proto : {"Simple", "LL128", "LL"}) {
    for (int channels : {0, 8, 16, 32}) {
      ::setenv("NCCL_PROTO", proto, 1);  // read at communicator creation
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      if (channels > 0) {
        config.minCTAs = channels;
        config.maxCTAs = channels;
      }
      ncclUniqueId id;
      // A fresh id per communicator, passed over the existing communicator (rank 0 -> all).
      if (w.rank == 0) BENCH_NCCL(ncclGetUniqueId(&id));
      char* device_id = nullptr;
      BENCH_CUDA(cudaMalloc(&device_id, sizeof(id)));
      BENCH_CUDA(cudaMemcpyAsync(device_id, &id, sizeof(id), cudaMemcpyHostToDevice, w.stream));
      BENCH_NCCL(
          ncclBroadcast(device_id, device_id, sizeof(id), ncclChar, 0, w.comm->get(), w.stream));
      BENCH_CUDA(cudaStreamSynchronize(w.stream));
      BENCH_CUDA(cudaMemcpy(&id, device_id, sizeof(id), cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaFree(device_id));
      NcclVariant v{proto, channels, nullptr};
      BENCH_NCCL(ncclCommInitRankConfig(&v.comm, w.size, id, w.rank, &config));
      variants.push_back(v);
    }
  }
  ::unsetenv("NCCL_PROTO");
  return variants;
}

void run_nccl(World& w, const Options& o, std::vector<NcclVariant>& variants,
              const std::string& section, int64_t bytes, int num_bundles) {
  const int64_t total = bytes * num_bundles;
  void* buffer = nullptr;
  BENCH_CUDA(cudaMalloc(&buffer, total));
  if (w.rank == 0) {
    for (int k = 0; k < num_bundles; ++k) fill(static_cast<char*>(buffer) + k * bytes, bytes, k);
  } else {
    BENCH_CUDA(cudaMemset(buffer, 0, total));
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  Record best{section, "nccl-bcast", "best", 0, total, num_bundles, 1e30, 0};
  for (NcclVariant& v : variants) {
    // LL moves 8 bytes per 16 on the wire: never the best beyond a few MiB, and slow to time.
    if (v.proto == "LL" && total > (int64_t{32} << 20)) continue;
    for (int graph = 0; graph <= o.graph; ++graph) {
      double us = 0;
      if (!graph) {
        us = time_median_us(w, o.warmup, o.iters, [&](int) {
          BENCH_NCCL(ncclBroadcast(buffer, buffer, total, ncclChar, 0, v.comm, w.stream));
        });
      } else {
        us = time_graph_us(w, o.iters, [&] {
          BENCH_NCCL(ncclBroadcast(buffer, buffer, total, ncclChar, 0, v.comm, w.stream));
        });
      }
      const std::string variant = v.proto + "/ch" +
                                  (v.channels ? std::to_string(v.channels) : std::string("auto")) +
                                  (graph ? "/graph" : "/eager");
      Record r{section, "nccl-bcast", variant, 0, total, num_bundles, us, total / us / 1e3};
      r.group = group_text(group_of("in", w.size));
      if (o.check && w.rank != 0) {
        int64_t bad = 0;
        for (int k = 0; k < num_bundles; ++k) {
          bad += count_bad(static_cast<char*>(buffer) + k * bytes, bytes, k);
        }
        r.errors = bad;
      }
      if (o.check)
        r.errors = static_cast<int64_t>(max_over_ranks(w, std::max<int64_t>(0, r.errors)));
      if (section != "sweep") emit(w, r);
      if (us < best.time_us) best = r, best.variant = "best:" + variant;
    }
  }
  emit(w, best);
  BENCH_CUDA(cudaFree(buffer));
}

// ---- latency sections ----------------------------------------------------------------------

void run_latency(World& w, const Options& o) {
  const int iters = std::max(o.iters, 200);
  {
    RuntimeConfig c;
    c.num_ranks = w.size;
    c.num_experts = 256;
    c.num_slots = 2;
    c.bundle = {8192, 0};
    c.peer_memory = w.peer_memory;  // the last -M pass's
    Runtime rt(c, *w.comm);
    int32_t* rows = nullptr;
    int32_t* matrix = nullptr;
    BENCH_CUDA(cudaMalloc(&rows, 4 * c.num_experts));
    BENCH_CUDA(cudaMalloc(&matrix, 4 * c.num_experts * c.num_ranks));
    BENCH_CUDA(cudaMemsetAsync(rows, 0, 4 * c.num_experts, w.stream));
    const double us = time_median_us(w, 20, iters, [&](int i) {
      rt.exchange_counts(rows, matrix, static_cast<uint64_t>(i + 1), w.stream);
    });
    rt.check_status();
    emit(w, {"latency", "count-exchange", "P=" + std::to_string(w.size) + " E=256 nvlink", 1, 0, 0,
             us, 0, -1});
    int32_t* slot_expert = nullptr;
    BENCH_CUDA(cudaMalloc(&slot_expert, 4 * c.num_ranks * c.num_slots));
    const double gate_us = time_median_us(w, 20, iters, [&](int i) {
      const uint64_t g = static_cast<uint64_t>(i + 1);
      rt.replicate(nullptr, 0, 0, g, Transport::kPlan, w.stream, 1);
      rt.ready_gate(nullptr, 0, g, slot_expert, w.stream);
      rt.release_bank(g, w.stream);
    });
    rt.check_status();
    emit(w, {"latency", "ready-empty",
             "P=" + std::to_string(w.size) + " replicate(0 ops)+gate+release", 1, 0, 0, gate_us, 0,
             -1});
    // The same with device generations, and the whole invocation, as CUDA graphs.
    const std::string p_text = "P=" + std::to_string(w.size);
    auto empty_step = [&] {
      rt.replicate(nullptr, 0, 0, iser::kDeviceGeneration, Transport::kPlan, w.stream, 1);
      rt.ready_gate(nullptr, 0, iser::kDeviceGeneration, slot_expert, w.stream);
      rt.release_bank(iser::kDeviceGeneration, w.stream);
    };
    const double gate_graph_us = time_graph_us(w, iters, empty_step);
    emit(w, {"latency", "ready-empty", p_text + " same, graph", 1, 0, 0, gate_graph_us, 0, -1});
    const double invocation_us = time_graph_us(w, iters, [&] {
      rt.exchange_counts(rows, matrix, iser::kDeviceGeneration, w.stream);
      empty_step();
    });
    emit(w, {"latency", "invocation", p_text + " exchange+empty READY, graph", 1, 0, 0,
             invocation_us, 0, -1});
    const double replicate_us = time_median_us(w, 20, iters, [&](int) {
      rt.replicate(nullptr, 0, 0, iser::kDeviceGeneration, Transport::kPlan, w.stream, 1);
      rt.release_bank(iser::kDeviceGeneration, w.stream);
    });
    emit(w, {"latency", "replicate-empty", p_text + " replicate(0 ops)+release", 1, 0, 0,
             replicate_us, 0, -1});
    rt.check_status();
    BENCH_CUDA(cudaFree(rows));
    BENCH_CUDA(cudaFree(matrix));
    BENCH_CUDA(cudaFree(slot_expert));
  }
  barrier(w);
  if (w.rank != 0) return;
  // Logical ranks on one GPU: every rank's kernel work in one launch.
  for (int p : {2, 4, 8, 16}) {
    RuntimeConfig c;
    c.num_ranks = p;
    c.num_experts = 256;
    c.num_slots = 2;
    c.bundle = {8192, 0};
    auto rt = Runtime::logical(c);
    int32_t* rows = nullptr;
    int32_t* matrix = nullptr;
    BENCH_CUDA(cudaMalloc(&rows, 4 * c.num_experts * p));
    BENCH_CUDA(cudaMalloc(&matrix, 4 * c.num_experts * p * p));
    BENCH_CUDA(cudaMemsetAsync(rows, 0, 4 * c.num_experts * p, w.stream));
    std::vector<double> us;
    cudaEvent_t a, b;
    BENCH_CUDA(cudaEventCreate(&a));
    BENCH_CUDA(cudaEventCreate(&b));
    for (int i = 0; i < iters; ++i) {
      BENCH_CUDA(cudaEventRecord(a, w.stream));
      rt->exchange_counts(rows, matrix, static_cast<uint64_t>(i + 1), w.stream);
      BENCH_CUDA(cudaEventRecord(b, w.stream));
      BENCH_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
      us.push_back(ms * 1000.0);
    }
    std::sort(us.begin(), us.end());
    rt->check_status();
    Record r{"latency",
             "count-exchange",
             "P=" + std::to_string(p) + " E=256 logical/1 GPU",
             1,
             0,
             0,
             us[us.size() / 2],
             0,
             -1};
    g_records.push_back(r);
    std::printf("%-9s %-12s %-7s %-26s %4d %12d %3d %11.2f %9s %6s\n", r.section.c_str(),
                r.transport.c_str(), "-", r.variant.c_str(), 1, 0, 0, r.time_us, "-", "-");
    BENCH_CUDA(cudaEventDestroy(a));
    BENCH_CUDA(cudaEventDestroy(b));
    BENCH_CUDA(cudaFree(rows));
    BENCH_CUDA(cudaFree(matrix));
  }
}

void write_json(const Options& o) {
  if (o.json.empty()) return;
  FILE* f = std::fopen(o.json.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
    return;
  }
  std::fprintf(f, "[\n");
  for (size_t i = 0; i < g_records.size(); ++i) {
    const Record& r = g_records[i];
    std::fprintf(f,
                 "  {\"section\": \"%s\", \"transport\": \"%s\", \"group\": \"%s\", \"variant\": "
                 "\"%s\", \"sms\": %d, \"bytes\": %lld, \"bundles\": %d, \"time_us\": %.3f, "
                 "\"algbw_GBps\": %.3f, \"errors\": %lld}%s\n",
                 r.section.c_str(), r.transport.c_str(), r.group.c_str(), r.variant.c_str(), r.sms,
                 static_cast<long long>(r.bytes), r.bundles, r.time_us, r.algbw,
                 static_cast<long long>(r.errors), i + 1 < g_records.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  std::fclose(f);
}

int run_rank(const Options& o, int rank, int size, const std::string& id_file) {
  World w;
  w.rank = rank;
  w.size = size;
  BENCH_CUDA(cudaSetDevice(rank));
  w.comm = std::make_unique<iser::Communicator>(
      iser::Communicator::from_unique_id_file(id_file, rank, size));
  BENCH_CUDA(cudaStreamCreateWithPriority(&w.stream, cudaStreamNonBlocking, -5));
  BENCH_CUDA(cudaMalloc(&w.scratch, sizeof(double)));
  if (rank == 0) {
    cudaDeviceProp prop{};
    BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf(
        "# bench_replicate: %d ranks, %s (%d SMs), warm-up %d, iterations %d, median per "
        "iteration, slowest rank\n",
        size, prop.name, prop.multiProcessorCount, o.warmup, o.iters);
    std::printf(
        "# group: the ranks whose helper slots (NCCL: buffers) receive owner 0's bundles\n");
    std::printf("%-9s %-12s %-7s %-26s %4s %12s %3s %11s %9s %6s\n", "#section", "transport",
                "group", "variant", "sms", "bytes", "nb", "time_us", "algbw", "errors");
  }
  std::vector<NcclVariant> variants;
  if (has(o.transports, "nccl")) variants = make_nccl_variants(w);
  for (const std::string& memory : o.peer_memories) {
    // One pass of the runtime rows per peer memory (NCCL's own broadcast once, in the first).
    w.peer_memory = iser::peer_memory_from_string(memory);
    w.report_peer_memory = true;
    const bool first = memory == o.peer_memories.front();
    const std::string tag = o.peer_memories.size() > 1 ? "@" + memory : "";
    if (has(o.sections, "bundles")) {
      for (int nb : o.bundle_counts) {
        run_runtime_transports(w, o, "bundles" + tag, kPaperBundle, nb);
        if (first && !variants.empty()) run_nccl(w, o, variants, "bundles", kPaperBundle, nb);
      }
    }
    if (has(o.sections, "sweep")) {
      for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
        run_runtime_transports(w, o, "sweep" + tag, bytes, 1);
        if (first && !variants.empty()) run_nccl(w, o, variants, "sweep", bytes, 1);
      }
    }
  }
  if (has(o.sections, "latency")) run_latency(w, o);
  for (auto& v : variants) ncclCommDestroy(v.comm);
  if (rank == 0) write_json(o);
  BENCH_CUDA(cudaFree(w.scratch));
  return 0;
}

int spawn_ranks(int argc, char** argv, const Options& o) {
  int gpus = 0;
  BENCH_CUDA(cudaGetDeviceCount(&gpus));
  if (gpus < o.ranks) {
    std::fprintf(stderr, "bench_replicate: -g %d needs %d GPUs, found %d\n", o.ranks, o.ranks,
                 gpus);
    return 1;
  }
  char dir[] = "/tmp/iser-bench-XXXXXX";
  if (!::mkdtemp(dir)) return 1;
  const std::string id_file = std::string(dir) + "/nccl-unique-id";
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("ISER_BENCH_RANK=" + std::to_string(r));
    env.push_back("ISER_BENCH_ID_FILE=" + id_file);
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return 1;
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  ::unlink(id_file.c_str());
  ::rmdir(dir);
  (void)argc;
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = bench_replicate::parse(argc, argv);
  const char* rank = std::getenv("ISER_BENCH_RANK");
  try {
    if (!rank) return spawn_ranks(argc, argv, o);
    return run_rank(o, std::atoi(rank), o.ranks, std::getenv("ISER_BENCH_ID_FILE"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_replicate: %s\n", e.what());
    return 1;
  }
}
