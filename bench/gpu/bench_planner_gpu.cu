// GPU planner benchmark (docs/design.md §11): kernel time of the HALO-Q planner alone, of
// planner + rewrite (one rank's tau x k routes; two kernels) and of the fused planner + rewrite
// (GpuPlanner::plan_rewrite, one cooperative kernel) per EP degree, on counts sampled from the
// bundled real histograms (dsv41-flash/coding.csv, docs/design.md §8 sampling rule). CUDA events
// around CUDA-graph replays, L2 flushed before every replay, inputs cycled; medians of >= 200
// samples. Baselines measured in the same run: the CPU reference planner (plan_halo_q, one core) on
// the same counts and the count kernel.
//
//   bench_planner_gpu [-p 4,8,16,32,64] [-E 384] [-S 4] [-t 8192] [-k 6] [-w 20] [-n 400]
//                     [-G 1] [-c 1] [-J out.json] [-d coding.csv] [-i 16] [-P halo-q,iser]
//                     [-R auto]
//   -w/-n warm-up/timed replays, -G 1 graph replays (0: direct launches), -c 1 check every plan
//   and slot id against the CPU, -J JSON file, -d histogram CSV, -i inputs (layers) per EP,
//   -P policies, each timed per EP in the same run (halo-q: plan_halo_q; iser: plan_iser
//   without a previous plan, GpuPlannerOptions::iser, rewritten as rewrite_tokens does; its CPU
//   baseline is plan_iser), -R the repair
//   schedule (GpuPlanner::set_repair_schedule): auto (default; scheduled from
//   kGpuScheduledRepairMinRanks ranks), phases (or 0) or scheduled (or 1) at every EP.
//   fused_us: plan_rewrite() in the same run, fused/2k its ratio to plan+rw_us (two kernels).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../tests/gpu/routing_samples.h"
#include "bench_util.cuh"
#include "iser/counts.h"
#include "iser/gpu_planner.h"
#include "iser/planner.h"
#include "iser/rewrite.h"

namespace {

using iser::bench::default_data_path;
using iser::bench::empty_kernel;
using iser::bench::make_graph;
using iser::bench::median;

struct Args {
  std::vector<int> ranks = {4, 8, 16, 32, 64};
  int experts = 384;
  int slots = 4;
  int tokens = 8192;
  int top_k = 6;
  int warmup = 20;
  int iters = 400;
  bool graph = true;
  bool check = true;
  int inputs = 16;
  std::string json;
  std::string data;
  std::vector<std::string> policies = {"halo-q"};
  iser::RepairSchedule repair = iser::RepairSchedule::kAuto;
};

std::string repair_name(iser::RepairSchedule r) {
  switch (r) {
    case iser::RepairSchedule::kPhases:
      return "by phases (-R phases)";
    case iser::RepairSchedule::kScheduled:
      return "scheduled (-R scheduled)";
    case iser::RepairSchedule::kAuto:
      break;
  }
  return "auto (-R auto: scheduled from EP" + std::to_string(iser::kGpuScheduledRepairMinRanks) +
         ", by phases below)";
}

Args parse(int argc, char** argv) {
  Args a;
  a.data = default_data_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "-p") {
      a.ranks = iser::bench::int_list(v);
    } else if (flag == "-E") {
      a.experts = std::atoi(v);
    } else if (flag == "-S") {
      a.slots = std::atoi(v);
    } else if (flag == "-t") {
      a.tokens = std::atoi(v);
    } else if (flag == "-k") {
      a.top_k = std::atoi(v);
    } else if (flag == "-w") {
      a.warmup = std::atoi(v);
    } else if (flag == "-n") {
      a.iters = std::atoi(v);
    } else if (flag == "-G") {
      a.graph = std::atoi(v) != 0;
    } else if (flag == "-c") {
      a.check = std::atoi(v) != 0;
    } else if (flag == "-J") {
      a.json = v;
    } else if (flag == "-R") {
      const std::string r = v;
      if (r == "auto") {
        a.repair = iser::RepairSchedule::kAuto;
      } else if (r == "phases" || r == "0") {
        a.repair = iser::RepairSchedule::kPhases;
      } else if (r == "scheduled" || r == "1") {
        a.repair = iser::RepairSchedule::kScheduled;
      } else {
        std::fprintf(stderr, "-R: unknown repair schedule %s (auto, phases, scheduled)\n", v);
        std::exit(2);
      }
    } else if (flag == "-d") {
      a.data = v;
    } else if (flag == "-i") {
      a.inputs = std::atoi(v);
    } else if (flag == "-P") {
      a.policies.clear();
      for (const char* s = v; *s != '\0';) {
        const char* comma = std::strchr(s, ',');
        const size_t len = comma != nullptr ? comma - s : std::strlen(s);
        a.policies.emplace_back(s, len);
        if (a.policies.back() != "halo-q" && a.policies.back() != "iser") {
          std::fprintf(stderr, "-P: unknown policy %s (halo-q, iser)\n", a.policies.back().c_str());
          std::exit(2);
        }
        s += len + (comma != nullptr ? 1 : 0);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  iser::bench::require_timed_replays(a.iters);
  return a;
}

// One timed configuration: `enqueue(i)` puts input i's work on the stream. Returns event medians
// (us) and, when timer != nullptr, the median in-kernel span of the planner (us).
// Stamps 0 .. kStages are consecutive stage boundaries (GpuPlanner::set_plan_timer); the last
// stamp is the end of the coloring.
inline constexpr int kStages = 7;

struct Timing {
  double event_us = 0;
  double kernel_us = 0;
  // stage 1, placement, repair set-up, pair lists, levels, trades, output
  double stage_us[kStages] = {};
  double coloring_us = 0;  // placement end -> coloring end (warp 0, beside set-up and repair)
  // The fused kernel's first rewrite CTA (GpuPlanner::set_plan_timer), from the plan CTA's start:
  // its start, ordinals done, plan seen, tables staged, routes written.
  double rewrite_us[iser::kGpuRewriteTimerSlots] = {};
};

template <typename Enqueue>
Timing time_replays(const Args& args, int num_inputs, cudaStream_t stream, void* flush,
                    size_t flush_bytes, unsigned long long* timer, Enqueue&& enqueue) {
  constexpr int kPlanSlots = iser::kGpuPlanTimerSlots;
  constexpr int kSlots = kPlanSlots + iser::kGpuRewriteTimerSlots;
  static_assert(kStages + 2 == kPlanSlots);
  const int total = args.warmup + args.iters;
  std::vector<cudaEvent_t> start(total), stop(total);
  for (int j = 0; j < total; ++j) {
    BENCH_CUDA(cudaEventCreate(&start[j]));
    BENCH_CUDA(cudaEventCreate(&stop[j]));
  }
  unsigned long long* spans = nullptr;
  BENCH_CUDA(cudaMallocHost(&spans, sizeof(unsigned long long) * kSlots * total));
  for (int j = 0; j < total; ++j) {
    if (flush_bytes > 0) BENCH_CUDA(cudaMemsetAsync(flush, j & 0xff, flush_bytes, stream));
    BENCH_CUDA(cudaEventRecord(start[j], stream));
    enqueue(j % num_inputs);
    BENCH_CUDA(cudaEventRecord(stop[j], stream));
    if (timer != nullptr) {
      BENCH_CUDA(cudaMemcpyAsync(spans + kSlots * j, timer, kSlots * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost, stream));
    }
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> ev, kern, coloring, stage[kStages], rewrite[iser::kGpuRewriteTimerSlots];
  for (int j = args.warmup; j < total; ++j) {
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start[j], stop[j]));
    ev.push_back(ms * 1e3);
    if (timer != nullptr) {
      const unsigned long long* t = spans + kSlots * j;
      kern.push_back((t[kStages] - t[0]) * 1e-3);
      for (int k = 0; k < kStages; ++k) stage[k].push_back((t[k + 1] - t[k]) * 1e-3);
      coloring.push_back((t[kStages + 1] - t[2]) * 1e-3);
      for (int k = 0; k < iser::kGpuRewriteTimerSlots; ++k) {
        // Signed: a rewrite CTA may start before the plan CTA.
        rewrite[k].push_back(static_cast<double>(static_cast<long long>(t[kPlanSlots + k] - t[0])) *
                             1e-3);
      }
    }
  }
  for (int j = 0; j < total; ++j) {
    BENCH_CUDA(cudaEventDestroy(start[j]));
    BENCH_CUDA(cudaEventDestroy(stop[j]));
  }
  BENCH_CUDA(cudaFreeHost(spans));
  Timing timing{median(ev), median(kern), {}};
  for (int k = 0; k < kStages; ++k) timing.stage_us[k] = median(stage[k]);
  if (timer != nullptr) timing.coloring_us = median(coloring);
  for (int k = 0; k < iser::kGpuRewriteTimerSlots && timer != nullptr; ++k) {
    timing.rewrite_us[k] = median(rewrite[k]);
  }
  return timing;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace iser;
  const Args args = parse(argc, argv);
  const auto layers = gpu_test::read_histogram_csv(args.data);
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "# bench_planner_gpu on %s (%d SMs, L2 %d MiB), E=%d S=%d tau=%d k=%d, %s, "
      "median of %d, L2 flushed, repair %s\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, args.experts, args.slots,
      args.tokens, args.top_k, args.graph ? "graph replays" : "launches", args.iters,
      repair_name(args.repair).c_str());
  std::printf("# %4s %7s %14s %14s %14s %10s %9s %14s %14s %12s %10s\n", "EP", "policy", "plan_us",
              "plan_kern_us", "plan+rw_us", "fused_us", "fused/2k", "count_us", "cpu_plan_us",
              "cpu/gpu", "bcasts");
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t flush_bytes = std::max<size_t>(size_t{4} * prop.l2CacheSize, size_t{256} << 20);
  void* flush = nullptr;
  BENCH_CUDA(cudaMalloc(&flush, flush_bytes));
  unsigned long long* timer = nullptr;
  constexpr int kTimerSlots = kGpuPlanTimerSlots + kGpuRewriteTimerSlots;
  BENCH_CUDA(cudaMalloc(&timer, kTimerSlots * sizeof(unsigned long long)));
  BENCH_CUDA(cudaMemsetAsync(timer, 0, kTimerSlots * sizeof(unsigned long long), stream));

  std::string json = "[";
  bool all_ok = true;
  for (const int P : args.ranks) {
    const Topology topo = Topology::make(P, args.experts, args.slots);
    const int n = args.tokens * args.top_k;
    const int num_inputs = std::max(1, args.inputs);
    // Input i: layer 3 + i of the histograms (layers 0-2 are hash-routed), every rank sampled.
    std::vector<std::vector<int32_t>> ids(num_inputs);
    std::vector<CountMatrix> counts(num_inputs);
    std::vector<std::thread> workers;
    for (int i = 0; i < num_inputs; ++i) {
      workers.emplace_back([&, i] {
        const auto& weights = layers[(3 + i) % layers.size()];
        std::vector<double> w(weights.begin(), weights.end());
        w.resize(args.experts, 0.0);
        ids[i].resize(static_cast<size_t>(P) * n);
        gpu_test::sample_tokens(w, P, args.tokens, args.top_k, 0.0, 1000 * P + i, ids[i].data());
        counts[i] = CountMatrix::from_topk(ids[i], P, args.tokens, args.top_k, args.experts);
      });
    }
    for (auto& t : workers) t.join();

    for (const std::string& policy : args.policies) {
      const bool iser = policy == "iser";
      GpuPlannerOptions options;
      options.iser = iser;
      HaloQOptions cpu_options;
      auto cpu_planner = [&](const CountMatrix& c, PlannerWorkspace& ws, Plan& plan) {
        if (iser) {
          plan_iser(topo, c, cpu_options, ws, plan);
        } else {
          plan_halo_q(topo, c, cpu_options, ws, plan);
        }
      };

      // One planner per input: rewrite() uses the tile counts of the input's own count().
      std::vector<GpuPlanner> planners;
      std::vector<int32_t*> d_counts(num_inputs), d_plan(num_inputs), d_ids(num_inputs),
          d_slots(num_inputs), d_row(num_inputs), d_fused_plan(num_inputs),
          d_fused_slots(num_inputs);
      const int rank = 0;
      for (int i = 0; i < num_inputs; ++i) {
        planners.emplace_back(topo, n, options);
        planners.back().set_repair_schedule(args.repair);
        BENCH_CUDA(cudaMalloc(&d_counts[i], sizeof(int32_t) * P * args.experts));
        BENCH_CUDA(cudaMalloc(&d_plan[i], sizeof(int32_t) * planners[i].plan_words()));
        BENCH_CUDA(cudaMalloc(&d_ids[i], sizeof(int32_t) * n));
        BENCH_CUDA(cudaMalloc(&d_slots[i], sizeof(int32_t) * n));
        BENCH_CUDA(cudaMalloc(&d_fused_plan[i], sizeof(int32_t) * planners[i].plan_words()));
        BENCH_CUDA(cudaMalloc(&d_fused_slots[i], sizeof(int32_t) * n));
        BENCH_CUDA(cudaMalloc(&d_row[i], sizeof(int32_t) * args.experts));
        // NOTE: on `stream`, the non-blocking stream that count() uses next: a cudaMemcpy (legacy
        // stream) may return before its DMA lands, and nothing orders the count kernel after it.
        BENCH_CUDA(cudaMemcpyAsync(d_counts[i], counts[i].data().data(),
                                   sizeof(int32_t) * P * args.experts, cudaMemcpyHostToDevice,
                                   stream));
        BENCH_CUDA(cudaMemcpyAsync(d_ids[i], ids[i].data() + static_cast<size_t>(rank) * n,
                                   sizeof(int32_t) * n, cudaMemcpyHostToDevice, stream));
        planners[i].count(d_ids[i], args.tokens, args.top_k, d_row[i], stream);
      }
      BENCH_CUDA(cudaStreamSynchronize(stream));

      std::vector<cudaGraphExec_t> g_plan(num_inputs), g_both(num_inputs), g_fused(num_inputs),
          g_fused_timed(num_inputs), g_count(num_inputs);
      auto plan_work = [&](int i) { planners[i].plan(d_counts[i], d_plan[i], stream); };
      auto both_work = [&](int i) {
        planners[i].plan(d_counts[i], d_plan[i], stream);
        planners[i].rewrite(d_ids[i], args.tokens, args.top_k, rank, d_counts[i], d_plan[i],
                            d_slots[i], stream);
      };
      // The fused kernel writes its own plan and slot buffers: both paths are checked below.
      auto fused_work = [&](int i) {
        planners[i].plan_rewrite(d_counts[i], d_fused_plan[i], d_ids[i], args.tokens, args.top_k,
                                 rank, d_fused_slots[i], stream);
      };
      auto count_work = [&](int i) {
        planners[i].count(d_ids[i], args.tokens, args.top_k, d_row[i], stream);
      };
      auto run = [&](std::vector<cudaGraphExec_t>& graphs, auto& direct) {
        return [&](int i) {
          if (args.graph) {
            BENCH_CUDA(cudaGraphLaunch(graphs[i], stream));
          } else {
            direct(i);
          }
        };
      };
      // The planner-alone graphs record the in-kernel span; the others do not.
      if (args.graph) {
        for (int i = 0; i < num_inputs; ++i) {
          planners[i].set_plan_timer(timer);
          g_plan[i] = make_graph(stream, [&] { plan_work(i); });
          planners[i].set_plan_timer(nullptr);
          g_both[i] = make_graph(stream, [&] { both_work(i); });
          g_fused[i] = make_graph(stream, [&] { fused_work(i); });
          planners[i].set_plan_timer(timer);  // the fused kernel's plan CTA, stage by stage
          g_fused_timed[i] = make_graph(stream, [&] { fused_work(i); });
          planners[i].set_plan_timer(nullptr);
          g_count[i] = make_graph(stream, [&] { count_work(i); });
        }
      }
      for (auto& planner : planners) planner.set_plan_timer(timer);
      const Timing t_plan =
          time_replays(args, num_inputs, stream, flush, flush_bytes, timer, run(g_plan, plan_work));
      // Same replays with L2 left warm (the counts, the plan and the kernel's code stay cached).
      const Timing t_warm =
          time_replays(args, num_inputs, stream, flush, 0, timer, run(g_plan, plan_work));
      for (auto& planner : planners) planner.set_plan_timer(nullptr);
      const Timing t_both = time_replays(args, num_inputs, stream, flush, flush_bytes, nullptr,
                                         run(g_both, both_work));
      const Timing t_fused = time_replays(args, num_inputs, stream, flush, flush_bytes, nullptr,
                                          run(g_fused, fused_work));
      // The same with the plan CTA's stage stamps (a separate run: the stamps cost a little).
      for (auto& planner : planners) planner.set_plan_timer(timer);
      const Timing t_fused_timed = time_replays(args, num_inputs, stream, flush, flush_bytes, timer,
                                                run(g_fused_timed, fused_work));
      for (auto& planner : planners) planner.set_plan_timer(nullptr);
      const Timing t_count = time_replays(args, num_inputs, stream, flush, flush_bytes, nullptr,
                                          run(g_count, count_work));

      // CPU reference planner on the same counts (one core, workspace reused).
      std::vector<double> cpu_us;
      PlannerWorkspace ws;
      Plan cpu_plan;
      for (int j = 0; j < args.warmup + args.iters; ++j) {
        const auto t0 = std::chrono::steady_clock::now();
        cpu_planner(counts[j % num_inputs], ws, cpu_plan);
        const auto t1 = std::chrono::steady_clock::now();
        if (j >= args.warmup)
          cpu_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      const double cpu = median(cpu_us);

      // Check: every input's GPU plan and slot ids equal the CPU's.
      int broadcasts = 0;
      bool ok = true;
      BENCH_CUDA(cudaStreamSynchronize(stream));
      for (int i = 0; i < num_inputs && args.check; ++i) {
        Plan want;
        cpu_planner(counts[i], ws, want);
        const Plan got = download_plan(planners[i].layout(), d_plan[i]);
        broadcasts += static_cast<int>(want.broadcasts.size());
        std::vector<int32_t> want_slots(n), got_slots(n), fused_slots(n);
        rewrite_tokens(topo, counts[i], want, rank,
                       std::span<const int32_t>(ids[i]).subspan(static_cast<size_t>(rank) * n, n),
                       args.top_k, want_slots);
        BENCH_CUDA(
            cudaMemcpy(got_slots.data(), d_slots[i], sizeof(int32_t) * n, cudaMemcpyDeviceToHost));
        BENCH_CUDA(cudaMemcpy(fused_slots.data(), d_fused_slots[i], sizeof(int32_t) * n,
                              cudaMemcpyDeviceToHost));
        const Plan fused = download_plan(planners[i].layout(), d_fused_plan[i]);
        const uint32_t errors = planners[i].read_errors();
        const bool parts[] = {got == want, got_slots == want_slots, fused == want,
                              fused_slots == want_slots, errors == 0};
        const char* const names[] = {"plan", "slot ids", "fused plan", "fused slot ids",
                                     "error word"};
        static_assert(std::size(parts) == std::size(names));
        for (size_t k = 0; k < std::size(parts); ++k) {
          if (!parts[k]) {
            std::fprintf(stderr,
                         "# check: EP%d input %d: %s differs from the CPU's (error word %u)\n", P,
                         i, names[k], errors);
          }
          ok &= parts[k];
        }
      }
      all_ok &= ok;
      char both[32];
      char fused[32];
      char ratio[32];
      std::snprintf(both, sizeof(both), "%.2f", t_both.event_us);
      std::snprintf(fused, sizeof(fused), "%.2f", t_fused.event_us);
      std::snprintf(ratio, sizeof(ratio), "%.3f", t_fused.event_us / t_both.event_us);
      std::printf("  %4d %7s %14.2f %14.2f %14s %10s %9s %14.2f %14.2f %12.2f %10.1f%s\n", P,
                  policy.c_str(), t_plan.event_us, t_plan.kernel_us, both, fused, ratio,
                  t_count.event_us, cpu, cpu / t_plan.event_us,
                  static_cast<double>(broadcasts) / num_inputs,
                  args.check ? (ok ? "  check ok" : "  CHECK FAILED") : "");
      for (const Timing* t : {&t_plan, &t_warm, &t_fused_timed}) {
        std::printf(
            "       %s: plan %.2f us (in-kernel %.2f): hist+candidates %.2f, placement %.2f, "
            "repair set-up+modes %.2f, repair: pair lists %.2f, levels %.2f, trades %.2f, "
            "output %.2f; coloring (beside set-up and repair) ends %.2f after placement\n",
            t == &t_plan ? "L2 flushed" : (t == &t_warm ? "L2 warm   " : "fused, L2 flushed"),
            t->event_us, t->kernel_us, t->stage_us[0], t->stage_us[1], t->stage_us[2],
            t->stage_us[3], t->stage_us[4], t->stage_us[5], t->stage_us[6], t->coloring_us);
      }
      {
        const double* r = t_fused_timed.rewrite_us;
        std::printf(
            "       fused, first rewrite CTA (us from the plan CTA's start): start %.2f, ordinals "
            "done %.2f, plan seen %.2f, tables staged %.2f, routes written %.2f\n",
            r[0], r[1], r[2], r[3], r[4]);
      }
      auto stages = [](const Timing& t) {
        std::string list;
        for (double v : t.stage_us) list += (list.empty() ? "" : ",") + std::to_string(v);
        return "[" + list + "]";
      };
      char buf[1024];
      std::snprintf(
          buf, sizeof(buf),
          "%s{\"ep\":%d,\"policy\":\"%s\",\"experts\":%d,\"slots\":%d,\"tokens\":%d,\"top_k\":%d,"
          "\"plan_us\":%.3f,\"plan_kernel_us\":%.3f,\"plan_rewrite_us\":%.3f,"
          "\"fused_plan_rewrite_us\":%.3f,"
          "\"count_us\":%.3f,\"cpu_plan_us\":%.3f,\"stages_us\":%s,\"coloring_us\":%.3f,"
          "\"plan_warm_us\":%.3f,\"plan_warm_kernel_us\":%.3f,\"warm_stages_us\":%s,"
          "\"check\":%s}",
          json.size() > 1 ? "," : "", P, policy.c_str(), args.experts, args.slots, args.tokens,
          args.top_k, t_plan.event_us, t_plan.kernel_us, t_both.event_us, t_fused.event_us,
          t_count.event_us, cpu, stages(t_plan).c_str(), t_plan.coloring_us, t_warm.event_us,
          t_warm.kernel_us, stages(t_warm).c_str(), args.check ? (ok ? "true" : "false") : "null");
      json += buf;

      for (int i = 0; i < num_inputs; ++i) {
        if (args.graph) {
          BENCH_CUDA(cudaGraphExecDestroy(g_plan[i]));
          BENCH_CUDA(cudaGraphExecDestroy(g_both[i]));
          BENCH_CUDA(cudaGraphExecDestroy(g_fused[i]));
          BENCH_CUDA(cudaGraphExecDestroy(g_fused_timed[i]));
          BENCH_CUDA(cudaGraphExecDestroy(g_count[i]));
        }
        BENCH_CUDA(cudaFree(d_counts[i]));
        BENCH_CUDA(cudaFree(d_plan[i]));
        BENCH_CUDA(cudaFree(d_ids[i]));
        BENCH_CUDA(cudaFree(d_slots[i]));
        BENCH_CUDA(cudaFree(d_fused_plan[i]));
        BENCH_CUDA(cudaFree(d_fused_slots[i]));
        BENCH_CUDA(cudaFree(d_row[i]));
      }
    }  // policies
  }
  {
    // Timed last, with the GPU warm (timed first, it also measures the clocks ramping up).
    const auto launch_empty = [&] { empty_kernel<<<1, 32, 0, stream>>>(); };
    const cudaGraphExec_t g_empty = args.graph ? make_graph(stream, launch_empty) : nullptr;
    const Timing t_floor = time_replays(args, 1, stream, flush, flush_bytes, nullptr, [&](int) {
      if (g_empty != nullptr) {
        BENCH_CUDA(cudaGraphLaunch(g_empty, stream));
      } else {
        launch_empty();
      }
    });
    if (g_empty != nullptr) BENCH_CUDA(cudaGraphExecDestroy(g_empty));
    std::printf("# floor: an empty kernel timed the same way: %.2f us\n", t_floor.event_us);
  }
  json += "]\n";
  if (!args.json.empty()) {
    FILE* f = std::fopen(args.json.c_str(), "w");
    if (f != nullptr) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
  BENCH_CUDA(cudaFree(flush));
  BENCH_CUDA(cudaFree(timer));
  BENCH_CUDA(cudaStreamDestroy(stream));
  return all_ok ? 0 : 1;
}
