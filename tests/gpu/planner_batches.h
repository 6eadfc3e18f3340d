// Harness of the GPU planner tests (test_gpu_planner.cpp, test_gpu_plan_rewrite.cpp): batches of
// random, real-histogram and power-law inputs run through count -> plan -> rewrite on the GPU and
// compared bit for bit with the CPU planner (plan_halo_q / plan_iser, rewrite_tokens). Inputs are
// batched (one plan per CTA, every rank of every input in one rewrite launch) to keep device time
// small.
//
// ISER_GPU_TEST_SCALE (default 1) scales the number of inputs (the compute-sanitizer runs use a
// small fraction).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cuda/planner_kernels.h"
#include "gpu/gpu_test_util.h"
#include "gpu/routing_samples.h"
#include "iser/counts.h"
#include "iser/error.h"
#include "iser/gpu_planner.h"
#include "iser/planner.h"
#include "iser/rewrite.h"

namespace iser::planner_test {

inline double test_scale() {
  const char* s = std::getenv("ISER_GPU_TEST_SCALE");
  return s != nullptr ? std::max(0.0, std::atof(s)) : 1.0;
}

// Runs body(i) for i in [0, n) on all cores.
template <typename Body>
inline void parallel_for(int n, Body&& body) {
  const int workers = std::max(1u, std::min(std::thread::hardware_concurrency(), 32u));
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) body(i);
    });
  }
  for (auto& t : pool) t.join();
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) {
    ISER_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& v) {
    ISER_CUDA_CHECK(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    // Landed before a non-blocking stream's kernel reads it (the copy may return before its DMA).
    ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    ISER_CUDA_CHECK(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

inline HaloQOptions cpu_options(const GpuPlannerOptions& o) {
  HaloQOptions cpu;
  cpu.owner_home = o.owner_home;
  cpu.absorb = o.absorb;
  cpu.owner_in_group = o.owner_in_group;
  cpu.min_move = o.min_move;
  return cpu;
}

// The GPU planner's policy variants (GpuPlannerOptions), rotated over batches.
inline GpuPlannerOptions variant(int idx) {
  GpuPlannerOptions o;
  switch (idx % 5) {
    case 1:
      o.owner_home = true;
      break;
    case 2:
      o.absorb = true;
      break;
    case 3:
      o.owner_in_group = true;
      break;
    case 4:
      o.min_move = 3;
      break;
    default:
      break;
  }
  return o;
}

// iser variants (GpuPlannerOptions::iser, non-resident): plain and with min_move.
inline GpuPlannerOptions iser_variant(int idx) {
  GpuPlannerOptions o;
  o.iser = true;
  o.min_move = idx % 2 == 1 ? 3 : 0;
  return o;
}

// True if some expert has more than one broadcast (iser exports a very hot expert again).
inline bool repeats_an_expert(const Plan& plan) {
  for (size_t i = 0; i < plan.broadcasts.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (plan.broadcasts[i].expert == plan.broadcasts[j].expert) return true;
    }
  }
  return false;
}

// iser plans compared so far (plans and slot ids) that broadcast an expert twice (coverage of
// that path).
inline std::atomic<int> g_iser_repeats{0};

// True if plan_iser's chain leveling moved routes in `plan` (planned with `options`): the same
// counts planned without it give other loads.
inline bool chains_moved(const Topology& topo, const CountMatrix& counts, HaloQOptions options,
                         const Plan& plan) {
  options.iser_chains = false;
  return plan_iser(topo, counts, options).loads != plan.loads;
}

// iser plans compared so far whose chain leveling moved routes (coverage of that path).
inline std::atomic<int> g_iser_chains{0};

// True if plan_iser's top-up exports added a broadcast to `plan` (planned with `options`): the
// same counts planned without chains and top-up give fewer broadcasts (chain leveling adds none).
inline bool topped_up(const Topology& topo, const CountMatrix& counts, HaloQOptions options,
                      const Plan& plan) {
  options.iser_chains = false;
  return plan_iser(topo, counts, options).broadcasts.size() != plan.broadcasts.size();
}

// iser plans compared so far that top-up exports added a broadcast to (coverage of that path).
inline std::atomic<int> g_iser_top_ups{0};

// True if the plan_iser stage behind `stage` (an iser_* switch of HaloQOptions) changed `plan`
// (planned with `options`): the same counts planned with the switch off give another plan.
inline bool stage_kept(const Topology& topo, const CountMatrix& counts, HaloQOptions options,
                       bool HaloQOptions::*stage, const Plan& plan) {
  options.*stage = false;
  return !(plan_iser(topo, counts, options) == plan);
}

// iser plans compared so far that kept a breadth-first candidate, that the relay rounds changed
// and that kept a finest-ladder candidate or one of its second-choice rungs (coverage of those
// paths).
inline std::atomic<int> g_iser_breadth_first{0};
inline std::atomic<int> g_iser_relays{0};
inline std::atomic<int> g_iser_finest_ladder{0};
inline std::atomic<int> g_iser_second_choice{0};  // kept a second-choice rung

inline std::string first_difference(const Plan& gpu, const Plan& cpu) {
  if (gpu.target != cpu.target) return fmt::format("target {} vs {}", gpu.target, cpu.target);
  if (gpu.loads != cpu.loads) return "loads differ";
  if (gpu.owner_uses_home_slot != cpu.owner_uses_home_slot) return "owner_uses_home_slot";
  if (gpu.broadcasts.size() != cpu.broadcasts.size()) {
    return fmt::format("{} vs {} broadcasts", gpu.broadcasts.size(), cpu.broadcasts.size());
  }
  for (size_t b = 0; b < gpu.broadcasts.size(); ++b) {
    const Broadcast& x = gpu.broadcasts[b];
    const Broadcast& y = cpu.broadcasts[b];
    if (x == y) continue;
    return fmt::format(
        "broadcast {}: gpu (e {}, o {}, l {}, g [{},+{}), h {}, mode {}) cpu (e {}, o {}, l {}, "
        "g [{},+{}), h {}, mode {}){}",
        b, x.expert, x.owner, x.level, x.group_begin, x.group_size, x.helper,
        static_cast<int>(x.mode), y.expert, y.owner, y.level, y.group_begin, y.group_size, y.helper,
        static_cast<int>(y.mode), x.quota != y.quota ? " quotas differ" : "");
  }
  return "plans differ";
}

// One batch: num_inputs invocations of one topology, each P ranks x tokens x top_k ids. Runs
// count -> plan -> rewrite_all on the GPU and compares counts, plans and slot ids with the CPU.
// Returns the number of inputs checked.
struct Batch {
  Topology topo;
  GpuPlannerOptions options;
  int num_inputs = 0;
  int tokens = 0;
  int top_k = 0;
  std::vector<int32_t> ids;  // [num_inputs][P][tokens * top_k]
};

// How run_batch plans and rewrites: the repair schedule (GpuPlanner::set_repair_schedule), and
// plan() + rewrite_all() as one fused kernel (GpuPlanner::plan_rewrite_all).
struct BatchMode {
  RepairSchedule repair = RepairSchedule::kAuto;
  bool fused = false;
};

inline int run_batch(const Batch& batch, const std::string& label, const BatchMode& mode = {}) {
  const Topology& topo = batch.topo;
  const int P = topo.num_ranks;
  const int E = topo.num_experts;
  const int n = batch.tokens * batch.top_k;
  const int rows = batch.num_inputs * P;
  GpuPlanner planner(topo, std::max(n, 1), batch.options, rows);
  planner.set_repair_schedule(mode.repair);
  const int words = planner.plan_words();

  DeviceBuffer<int32_t> d_ids(batch.ids.size());
  DeviceBuffer<int32_t> d_counts(static_cast<size_t>(rows) * E);
  DeviceBuffer<int32_t> d_plans(static_cast<size_t>(batch.num_inputs) * words);
  DeviceBuffer<int32_t> d_slots(batch.ids.size());
  d_ids.upload(batch.ids);
  planner.count(d_ids.ptr, batch.tokens, batch.top_k, d_counts.ptr, nullptr, rows);
  const bool iser = batch.options.iser;
  if (mode.fused) {
    planner.plan_rewrite_all(d_counts.ptr, d_plans.ptr, d_ids.ptr, batch.tokens, batch.top_k,
                             batch.num_inputs, d_slots.ptr, nullptr);
  } else {
    planner.plan(d_counts.ptr, d_plans.ptr, nullptr, batch.num_inputs);
    planner.rewrite_all(d_ids.ptr, batch.tokens, batch.top_k, d_counts.ptr, d_plans.ptr,
                        batch.num_inputs, d_slots.ptr, nullptr);
  }
  ISER_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(planner.read_errors(), 0u) << label;
  const auto counts = d_counts.download(static_cast<size_t>(rows) * E);
  const auto plans = d_plans.download(static_cast<size_t>(batch.num_inputs) * words);
  const auto slots = d_slots.download(batch.ids.size());

  std::atomic<int> failures{0};
  std::vector<std::string> messages(batch.num_inputs);
  const HaloQOptions cpu = cpu_options(batch.options);
  parallel_for(batch.num_inputs, [&](int i) {
    if (failures.load() > 3) return;
    const size_t per_input = static_cast<size_t>(P) * n;
    const std::span<const int32_t> ids(batch.ids.data() + i * per_input, per_input);
    const CountMatrix expected = CountMatrix::from_topk(ids, P, batch.tokens, batch.top_k, E);
    const std::span<const int32_t> got_counts(counts.data() + static_cast<size_t>(i) * P * E,
                                              static_cast<size_t>(P) * E);
    if (!std::equal(got_counts.begin(), got_counts.end(), expected.data().begin())) {
      messages[i] = "counts differ";
      ++failures;
      return;
    }
    const std::span<const int32_t> words_i(plans.data() + static_cast<size_t>(i) * words, words);
    if (words_i[GpuPlanLayout::kStatus] != 0) {
      messages[i] = "status " + describe_gpu_status(words_i[GpuPlanLayout::kStatus]);
      ++failures;
      return;
    }
    const Plan gpu_plan = plan_from_words(planner.layout(), words_i);
    const Plan cpu_plan = iser ? plan_iser(topo, expected, cpu) : plan_halo_q(topo, expected, cpu);
    if (!(gpu_plan == cpu_plan)) {
      messages[i] = first_difference(gpu_plan, cpu_plan);
      ++failures;
      return;
    }
    if (iser && repeats_an_expert(cpu_plan)) ++g_iser_repeats;
    if (iser && chains_moved(topo, expected, cpu, cpu_plan)) ++g_iser_chains;
    if (iser && topped_up(topo, expected, cpu, cpu_plan)) ++g_iser_top_ups;
    if (iser && stage_kept(topo, expected, cpu, &HaloQOptions::iser_breadth_first, cpu_plan)) {
      ++g_iser_breadth_first;
    }
    if (iser && stage_kept(topo, expected, cpu, &HaloQOptions::iser_relay, cpu_plan)) {
      ++g_iser_relays;
    }
    std::vector<int32_t> want(n);
    for (int s = 0; s < P; ++s) {
      rewrite_tokens(topo, expected, cpu_plan, s, ids.subspan(static_cast<size_t>(s) * n, n),
                     batch.top_k, want);
      const int32_t* got = slots.data() + i * per_input + static_cast<size_t>(s) * n;
      for (int r = 0; r < n; ++r) {
        if (got[r] != want[r]) {
          messages[i] = fmt::format("rank {} route {} (expert {}): slot {} vs {}", s, r,
                                    ids[static_cast<size_t>(s) * n + r], got[r], want[r]);
          ++failures;
          return;
        }
      }
    }
  });
  for (int i = 0; i < batch.num_inputs; ++i) {
    EXPECT_TRUE(messages[i].empty()) << label << " input " << i << ": " << messages[i];
  }
  return batch.num_inputs;
}

inline const char* variant_name(const GpuPlannerOptions& o) {
  if (o.iser) return o.min_move > 0 ? "iser-min-move" : "iser";
  if (o.owner_home) return "owner-home";
  if (o.absorb) return "absorb";
  if (o.owner_in_group) return "halo-q-owner-in";
  if (o.min_move > 0) return "min-move";
  return "halo-q";
}

// >= 100,000 random inputs (at scale 1) over every P, E and S; `pick` chooses the variant of
// each batch. Returns the number of inputs checked.
template <typename Pick>
inline int check_random_inputs(Pick&& pick, const BatchMode& mode = {}) {
  const double scale = test_scale();
  // 5 and 7 besides the set: odd P with 6 seats (the register repair's largest) and 8.
  const int ranks[] = {2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 64, 72};
  const int experts[] = {64,  96,  128, 144, 192, 256, 288,  320, 384,
                         448, 512, 576, 640, 768, 896, 1008, 1024};
  int checked = 0;
  int batch_idx = 0;
  for (const int P : ranks) {
    std::vector<int> es;
    for (const int E : experts) {
      if (E % P == 0) es.push_back(E);
    }
    const int target = static_cast<int>(scale * (P <= 8    ? 13000
                                                 : P <= 24 ? 9000
                                                 : P <= 32 ? 4000
                                                           : 3000));
    int done = 0;
    for (int round = 0; done < target; ++round, ++batch_idx) {
      testing::SplitMix64 rng(1000 + batch_idx);
      const int E = es[round % es.size()];
      const int S = 1 + static_cast<int>(rng.below(16));
      const int g_min = round % 7 == 6 ? 1 + static_cast<int>(rng.below(3)) : kDefaultGMin;
      Batch batch{Topology::make(P, E, S, g_min), pick(batch_idx), 0, 0, 0, {}};
      batch.top_k = 1 + static_cast<int>(rng.below(std::min(8, E)));
      const bool multi_tile = round % 8 == 7;
      batch.tokens = multi_tile ? (2 * cuda::kRouteTile) / batch.top_k + 1 + rng.below(700)
                                : 4 + static_cast<int>(rng.below(120));
      const int max_inputs = std::max(1, 65535 / P);
      batch.num_inputs = std::min({multi_tile ? 40 : 600, max_inputs, target - done});
      const size_t per_input = static_cast<size_t>(P) * batch.tokens * batch.top_k;
      batch.ids.resize(per_input * batch.num_inputs);
      const bool zipf = round % 2 == 1;
      parallel_for(batch.num_inputs, [&](int i) {
        const uint64_t seed = (static_cast<uint64_t>(batch_idx) << 20) + i;
        if (zipf) {
          const auto weights = gpu_test::zipf_weights(E, 0.6 + 0.1 * (i % 8), seed);
          gpu_test::sample_tokens(weights, P, batch.tokens, batch.top_k, 1.0 / 32, seed,
                                  batch.ids.data() + i * per_input);
        } else {
          // Hot owners: half the draws on a quarter of the experts, at a random offset.
          std::vector<double> weights(E, 1.0);
          testing::SplitMix64 r(seed);
          const int hot = static_cast<int>(r.below(E));
          for (int e = 0; e < std::max(1, E / 4); ++e) weights[(hot + e) % E] = 4.0;
          gpu_test::sample_tokens(weights, P, batch.tokens, batch.top_k, 1.0 / 16, seed,
                                  batch.ids.data() + i * per_input);
        }
      });
      done += run_batch(batch,
                        fmt::format("P={} E={} S={} g_min={} {} tau={} k={}", P, E, S, g_min,
                                    variant_name(batch.options), batch.tokens, batch.top_k),
                        mode);
      if (::testing::Test::HasFailure()) return checked + done;
    }
    checked += done;
  }
  return checked;
}

// The bundled data: $ISER_SHARED_DATA when set (device runs copy it beside the tree), else the
// shared folder next to the checkout.
inline std::string shared_data(const char* rel) {
  const char* dir = std::getenv("ISER_SHARED_DATA");
  return (dir != nullptr ? std::string(dir) : std::string(ISER_SOURCE_DIR) + "/../shared/data") +
         "/" + rel;
}

// Every layer of the bundled coding.csv (every 8th below scale 1) at P 4..64, S 1/4/16, four
// variants from `pick`. Returns the number of inputs checked.
template <typename Pick>
inline int check_real_histograms(const std::vector<std::vector<double>>& layers, Pick&& pick,
                                 const BatchMode& mode = {}) {
  const int layer_step = test_scale() >= 1.0 ? 1 : 8;
  int checked = 0;
  for (const int P : {4, 8, 16, 32, 64}) {
    for (const int S : {1, 4, 16}) {
      for (int v = 0; v < 4; ++v) {
        const int num_layers = static_cast<int>(layers.size());
        Batch batch{Topology::make(P, 384, S), pick(v), 0, P <= 8 ? 2048 : 512, 6, {}};
        std::vector<int> picked;
        for (int l = v % layer_step; l < num_layers; l += layer_step) picked.push_back(l);
        batch.num_inputs = static_cast<int>(picked.size());
        const size_t per_input = static_cast<size_t>(P) * batch.tokens * batch.top_k;
        batch.ids.resize(per_input * batch.num_inputs);
        parallel_for(batch.num_inputs, [&](int i) {
          gpu_test::sample_tokens(layers[picked[i]], P, batch.tokens, batch.top_k, 0.0,
                                  static_cast<uint64_t>(P * 1000 + S * 10 + v) * 64 + i,
                                  batch.ids.data() + i * per_input);
        });
        checked += run_batch(
            batch, fmt::format("coding.csv P={} S={} {}", P, S, variant_name(batch.options)), mode);
        if (::testing::Test::HasFailure()) return checked;
      }
    }
  }
  return checked;
}

}  // namespace iser::planner_test
