// End-to-end benchmark of the reference EP MoE layer, one process per GPU
// (bench/moe/moe_bench.h): OFF and ON invocations interleaved on the same inputs, per
// iteration the slowest rank's times (NCCL max-reduce), medians printed by rank 0.
//
// The launcher re-executes its own binary once per rank (rank, world size and a private NCCL
// unique-id file in environment variables), as the multi-process tests do.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>
#include <CLI/CLI.hpp>

#include "bench/moe/bench_routing.h"
#include "bench/moe/moe_bench.h"
#include "cuda/device_buffer.h"
#include "cuda/moe_kernels.h"
#include "iser/error.h"
#include "iser/metrics.h"
#include "iser/moe_ep_graph.h"
#include "iser/moe_ep_layer.h"
#include "iser/trace.h"

extern char** environ;

namespace iser::moe {

using cuda::DeviceBuffer;
namespace {

struct LayerBenchOptions {
  int num_ranks = 2;
  int num_experts = 384;
  int num_slots = 4;
  int top_k = 6;
  int tokens = 8192;
  int g_min = 2;
  ExpertShape shape;
  std::vector<std::string> routings = {"power-law", "balanced"};
  double alpha = 0.8;
  // --routing trace: routes sampled from these layers of a routing trace (empty: the bundled
  // one), one row per layer; 15 and 33 are the bundled data's most skewed layers at EP2 (R 1.25
  // and 1.21 without balancing).
  std::string trace_path;
  std::string layers = "15,33";
  int warmup = 3;
  int iters = 20;
  uint64_t seed = 1;
  std::string planner = "auto";  // who plans ON invocations: auto | gpu | host (EpLayerOptions)
  // 1: also time the static-shape graph mode (GraphEpMoeLayer, ON and OFF, one CUDA graph
  // launch per invocation, on a runtime of its own) against the eager layer; 2: the same with
  // size-aware GEMMs (GraphLayerOptions::size_aware).
  int graph = 0;
};

// The routings of --routing, each (label, the whole token stream of one invocation: every rank's
// tau tokens). Throws iser::Error on a bad routing name, trace or layer list.
std::vector<std::pair<std::string, std::vector<int32_t>>> make_routings(
    const LayerBenchOptions& opt) {
  std::vector<std::pair<std::string, std::vector<int32_t>>> routings;
  for (const std::string& routing : opt.routings) {
    ISER_CHECK(routing == "power-law" || routing == "balanced" || routing == "trace",
               "--routing '{}': expected power-law, balanced or trace", routing);
    if (routing == "trace") {
      const auto trace = open_bench_trace(opt.trace_path, opt.num_experts, opt.top_k);
      for (int l : parse_layers(opt.layers, trace->metadata().num_layers)) {
        routings.emplace_back(fmt::format("trace:L{}", l),
                              trace->tokens(l, 0, opt.num_ranks, opt.tokens));
      }
      continue;
    }
    // balanced = the power-law generator with exponent 0 (uniform popularity).
    SyntheticOptions synthetic;
    synthetic.num_experts = opt.num_experts;
    synthetic.top_k = opt.top_k;
    synthetic.num_layers = 1;
    synthetic.alpha = routing == "balanced" ? 0.0 : opt.alpha;
    synthetic.seed = opt.seed;
    routings.emplace_back(routing,
                          make_synthetic(synthetic)->tokens(0, 0, opt.num_ranks, opt.tokens));
  }
  return routings;
}

// Spawns the ranks and waits for them; returns 0 when every rank exited with 0.
int launch_ranks(int world, const std::vector<std::string>& argv_tail) {
  char dir[] = "/tmp/iser-bench-XXXXXX";
  ISER_CHECK(::mkdtemp(dir) != nullptr, "bench moe layer: cannot create a private directory");
  const std::string id_file = std::string(dir) + "/nccl-unique-id";
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string_view(*e).starts_with("ISER_BENCH_")) continue;
      env.emplace_back(*e);
    }
    env.push_back(fmt::format("ISER_BENCH_RANK={}", r));
    env.push_back(fmt::format("ISER_BENCH_WORLD={}", world));
    env.push_back("ISER_BENCH_ID_FILE=" + id_file);
    std::vector<std::string> args = {"/proc/self/exe"};
    args.insert(args.end(), argv_tail.begin(), argv_tail.end());
    std::vector<char*> envp, argv;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ISER_CHECK(
        ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) == 0,
        "bench moe layer: cannot spawn rank {}", r);
    pids.push_back(pid);
  }
  int failures = 0;
  for (int r = 0; r < world; ++r) {
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench moe layer: rank %d failed (wait status %d)\n", r, status);
      ++failures;
    }
  }
  ::unlink(id_file.c_str());
  ::rmdir(dir);
  return failures == 0 ? 0 : 1;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

// Per iteration and mode, the fields reduced with max over ranks.
enum Field { kLayer, kShared, kCopy, kReadyWait, kCountsWait, kPlan, kGpuPlan, kNumFields };
// Modes of one iteration: eager OFF and ON, then (--graph 1) graph ON and OFF.
enum Mode { kEagerOff, kEagerOn, kGraphOn, kGraphOff };

// The graph-mode layers of --graph 1: ON and OFF on one runtime of their own (OFF uses no
// generation), their outputs, and the events timing a launch.
struct GraphModes {
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<GraphEpMoeLayer> on, off;
  cudaEvent_t begin = nullptr, end = nullptr;

  GraphModes(const LayerConfig& config, Communicator& comm, uint64_t seed, float scale,
             bool size_aware) {
    runtime = std::make_unique<Runtime>(ep_runtime_config(config), comm);
    on = std::make_unique<GraphEpMoeLayer>(
        config, *runtime, comm.get(), GraphLayerOptions{.balance = true, .size_aware = size_aware});
    off = std::make_unique<GraphEpMoeLayer>(
        config, *runtime, comm.get(),
        GraphLayerOptions{.balance = false, .size_aware = size_aware});
    on->fill_weights(seed, scale);
    off->fill_weights(seed, scale);
    ISER_CUDA_CHECK(cudaEventCreate(&begin));
    ISER_CUDA_CHECK(cudaEventCreate(&end));
  }
  ~GraphModes() {
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
  }
  GraphModes(const GraphModes&) = delete;
  GraphModes& operator=(const GraphModes&) = delete;

  // Writes one routing into both layers' static buffers and captures them (collective).
  void load(const void* input, size_t input_bytes, const std::vector<int32_t>& ids,
            const std::vector<float>& weights) {
    for (GraphEpMoeLayer* layer : {on.get(), off.get()}) {
      ISER_CUDA_CHECK(
          cudaMemcpy(layer->topk_ids(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
      ISER_CUDA_CHECK(cudaMemcpy(layer->topk_weights(), weights.data(), weights.size() * 4,
                                 cudaMemcpyHostToDevice));
      ISER_CUDA_CHECK(cudaMemcpy(layer->input(), input, input_bytes, cudaMemcpyDeviceToDevice));
      // Landed before the layer's non-blocking streams read them (these copies may return first).
      ISER_CUDA_CHECK(cudaStreamSynchronize(nullptr));
      layer->capture();
    }
  }
  // One launch of `layer`: its time (ms) between events around the launch on its stream.
  float time_launch(GraphEpMoeLayer& layer) {
    ISER_CUDA_CHECK(cudaEventRecord(begin, layer.stream()));
    layer.launch();
    ISER_CUDA_CHECK(cudaEventRecord(end, layer.stream()));
    const GraphLayerResult result = layer.finish();
    ISER_CHECK(result.fallback_slots == 0 && !result.plan_rejected,
               "bench moe layer: graph mode fell back ({} slots) or rejected its plan",
               result.fallback_slots);
    float ms = 0;
    ISER_CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
    return ms;
  }
};

int run_rank(const LayerBenchOptions& opt, int rank, int world, const std::string& id_file) {
  ISER_CHECK(world == opt.num_ranks, "bench moe layer: world {} != -P {}", world, opt.num_ranks);
  ISER_CUDA_CHECK(cudaSetDevice(rank));
  Communicator comm = Communicator::from_unique_id_file(id_file, rank, world);
  LayerConfig config;
  config.topo = Topology::make(opt.num_ranks, opt.num_experts, opt.num_slots, opt.g_min);
  config.shape = opt.shape;
  config.top_k = opt.top_k;
  config.tokens_per_rank = opt.tokens;
  Runtime runtime(ep_runtime_config(config), comm);
  EpLayerOptions layer_options;
  layer_options.planner = planner_from_string(opt.planner);
  EpMoeLayer layer(config, runtime, comm.get(), layer_options);
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(opt.shape.hidden));
  layer.fill_weights(opt.seed, weight_scale);
  std::unique_ptr<GraphModes> graph;
  if (opt.graph != 0) {
    graph = std::make_unique<GraphModes>(config, comm, opt.seed, weight_scale, opt.graph == 2);
  }
  const int num_modes = graph ? 4 : 2;

  const int64_t local_routes = int64_t{opt.tokens} * opt.top_k;
  const size_t elems = static_cast<size_t>(opt.tokens) * opt.shape.hidden;
  DeviceBuffer input(elems * 2), out_off(elems * 2), out_on(elems * 2);
  cuda::launch_fill_uniform({input.get<uint16_t>(), static_cast<int64_t>(elems),
                             opt.seed + static_cast<uint64_t>(rank), 1.0f},
                            nullptr);
  cudaDeviceProp prop{};
  ISER_CUDA_CHECK(cudaGetDeviceProperties(&prop, rank));
  if (rank == 0) {
    fmt::print(
        "# EP MoE layer end to end: {} x {} | EP{} E={} top-{} H={} S={} g_min={} | expert "
        "{}x{} bf16 | tau={} | median of {} (warm-up {}) of the slowest rank per "
        "iteration; OFF and ON interleaved | planner {}\n",
        world, prop.name, opt.num_ranks, opt.num_experts, opt.top_k, config.topo.experts_per_rank(),
        opt.num_slots, opt.g_min, opt.shape.hidden, opt.shape.intermediate, opt.tokens, opt.iters,
        opt.warmup, to_string(layer.planner()));
    fmt::print("# {}\n", runtime.describe());
    // plan_us: host time after the counts (host: plan + copy list + routing maps; gpu: decode +
    // validation + routing maps); gplan_us: the GPU planner + copy-list kernels on COPY (gpu);
    // counts_us: the host's wait for the counts (gpu: for the counts and the plan).
    fmt::print(
        "{:<10} {:>5} {:>6} {:>6} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}\n",
        "routing", "plan", "R_off", "R_on", "off_ms", "on_ms", "on/off", "shared_ms", "copy_ms",
        "ready_ms", "plan_us", "gplan_us", "counts_us", "bitEq");
    if (graph) {
      // Graph mode: one CUDA-graph launch per invocation (events around the launch), every slot
      // at M = C = tau * P rows (--graph 1) or at its row bucket (--graph 2, size-aware); bitEq:
      // both graph outputs equal eager OFF's.
      fmt::print("{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}   (graph mode, C = {}{})\n",
                 "routing", "off_ms", "on_ms", "g_on_ms", "g_off_ms", "gon/off", "gon/on", "bitEq",
                 graph->on->dims().slot_rows, opt.graph == 2 ? ", size-aware" : "");
    }
  }
  for (const auto& [routing, all_ids] : make_routings(opt)) {
    const std::vector<int32_t> ids(all_ids.begin() + rank * local_routes,
                                   all_ids.begin() + (rank + 1) * local_routes);
    // Gate weights in [0.05, 1): mt19937_64's output sequence is fixed by the standard.
    std::vector<float> topk_weights(local_routes);
    std::mt19937_64 rng(opt.seed * 1000003 + static_cast<uint64_t>(rank));
    for (float& w : topk_weights) {
      w = static_cast<float>(0.05 + 0.95 * static_cast<double>(rng() >> 11) * 0x1.0p-53);
    }
    const CountMatrix counts =
        CountMatrix::from_topk(all_ids, opt.num_ranks, opt.tokens, opt.top_k, opt.num_experts);

    if (graph) graph->load(input.get(), elems * 2, ids, topk_weights);
    std::vector<float> fields(static_cast<size_t>(kNumFields) * num_modes * opt.iters, 0.0f);
    double r_on = 1.0;
    bool bitwise_equal = true;
    bool graph_equal = true;
    for (int it = -opt.warmup; it < opt.iters; ++it) {
      for (int mode = 0; mode < num_modes; ++mode) {
        float* f = it < 0
                       ? nullptr
                       : fields.data() + (static_cast<size_t>(it) * num_modes + mode) * kNumFields;
        if (mode == kGraphOn || mode == kGraphOff) {
          const float ms = graph->time_launch(mode == kGraphOn ? *graph->on : *graph->off);
          if (f != nullptr) f[kLayer] = ms;
          continue;
        }
        const LayerInvocationStats stats = layer.forward(input.get(), ids, topk_weights, mode == 1,
                                                         mode == 1 ? out_on.get() : out_off.get());
        const EpLayerTimings t = layer.finish();
        if (mode == 1) r_on = imbalance_ratio(stats.plan.loads);
        if (f == nullptr) continue;
        f[kLayer] = t.layer_ms;
        f[kShared] = t.shared_ms;
        f[kCopy] = t.copy_ms;
        f[kReadyWait] = t.ready_wait_ms;
        f[kCountsWait] = static_cast<float>(t.counts_wait_us);
        f[kPlan] = static_cast<float>(t.plan_us);
        f[kGpuPlan] = t.gpu_plan_ms * 1000.0f;
        ISER_CHECK(!t.plan_rejected, "bench moe layer: the GPU plan was rejected (see stderr)");
      }
    }
    {
      std::vector<uint16_t> a(elems), b(elems);
      ISER_CUDA_CHECK(cudaMemcpy(a.data(), out_off.get(), elems * 2, cudaMemcpyDeviceToHost));
      ISER_CUDA_CHECK(cudaMemcpy(b.data(), out_on.get(), elems * 2, cudaMemcpyDeviceToHost));
      bitwise_equal = a == b;
      if (graph) {
        std::vector<uint16_t> g_on(elems), g_off(elems);
        ISER_CUDA_CHECK(
            cudaMemcpy(g_on.data(), graph->on->output(), elems * 2, cudaMemcpyDeviceToHost));
        ISER_CUDA_CHECK(
            cudaMemcpy(g_off.data(), graph->off->output(), elems * 2, cudaMemcpyDeviceToHost));
        graph_equal = g_on == a && g_off == a;
      }
    }
    // Slowest rank per iteration and field; bitwise equality: min over ranks.
    fields.push_back(bitwise_equal ? 0.0f : 1.0f);
    fields.push_back(graph_equal ? 0.0f : 1.0f);
    DeviceBuffer device_fields(fields.size() * sizeof(float));
    ISER_CUDA_CHECK(
        cudaMemcpy(device_fields.get(), fields.data(), fields.size() * 4, cudaMemcpyHostToDevice));
    ISER_NCCL_CHECK(ncclAllReduce(device_fields.get(), device_fields.get(), fields.size(),
                                  ncclFloat, ncclMax, comm.get(), nullptr));
    ISER_CUDA_CHECK(
        cudaMemcpy(fields.data(), device_fields.get(), fields.size() * 4, cudaMemcpyDeviceToHost));
    if (rank != 0) continue;
    const auto med = [&](int mode, Field field) {
      std::vector<float> v;
      v.reserve(static_cast<size_t>(opt.iters));
      for (int it = 0; it < opt.iters; ++it) {
        v.push_back(fields[(static_cast<size_t>(it) * num_modes + mode) * kNumFields + field]);
      }
      return median(v);
    };
    const double r_off = imbalance_ratio(counts.home_loads(config.topo));
    const float off_ms = med(0, kLayer), on_ms = med(1, kLayer);
    fmt::print(
        "{:<10} {:>5} {:>6.3f} {:>6.3f} {:>9.3f} {:>9.3f} {:>+7.2f}% {:>9.3f} {:>9.3f} {:>9.3f} "
        "{:>9.1f} {:>9.1f} {:>9.1f} {:>6}\n",
        routing, to_string(layer.planner()), r_off, r_on, off_ms, on_ms,
        100.0 * (on_ms / off_ms - 1), med(1, kShared), med(1, kCopy), med(1, kReadyWait),
        med(1, kPlan), med(1, kGpuPlan), med(1, kCountsWait),
        fields[fields.size() - 2] == 0.0f ? "yes" : "NO");
    if (graph) {
      const float g_on = med(kGraphOn, kLayer), g_off = med(kGraphOff, kLayer);
      fmt::print("{:<10} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>+8.2f}% {:>+8.2f}% {:>6}\n",
                 routing, off_ms, on_ms, g_on, g_off, 100.0 * (g_on / off_ms - 1),
                 100.0 * (g_on / on_ms - 1), fields.back() == 0.0f ? "yes" : "NO");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int layer_main(const std::vector<std::string>& args,
               const std::vector<std::string>& reexec_prefix) {
  LayerBenchOptions opt;
  CLI::App app{"EP MoE layer end to end, one process per GPU: OFF vs ON with overlap"};
  app.add_option("-P,--ranks", opt.num_ranks, "EP degree = GPUs = processes");
  app.add_option("-E,--experts", opt.num_experts, "routed experts");
  app.add_option("-S,--slots", opt.num_slots, "helper slots per rank");
  app.add_option("-k,--top-k", opt.top_k, "experts per token");
  app.add_option("-t,--tokens", opt.tokens, "tokens per rank (tau)");
  app.add_option("--g-min", opt.g_min, "smallest aligned group");
  app.add_option("--hidden", opt.shape.hidden, "expert hidden size He");
  app.add_option("--intermediate", opt.shape.intermediate, "expert intermediate size I");
  app.add_option("--routing", opt.routings, "power-law, balanced and/or trace")->delimiter(',');
  app.add_option("--trace", opt.trace_path, "--routing trace: routing trace (default: bundled)");
  app.add_option("--layers", opt.layers,
                 "--routing trace: trace layers, first:last:step or a comma list");
  app.add_option("--alpha", opt.alpha, "power-law exponent");
  app.add_option("-w,--warmup", opt.warmup, "warm-up iterations");
  app.add_option("-n,--iters", opt.iters, "timed iterations (median)");
  app.add_option("--seed", opt.seed, "routing / weight seed");
  app.add_option("--planner", opt.planner,
                 "who plans ON invocations: auto (default: gpu where it covers the policy), gpu "
                 "or host")
      ->check(CLI::IsMember({"auto", "host", "gpu"}));
  app.add_option("--graph", opt.graph,
                 "1: also time the static-shape CUDA-graph mode (ON and OFF; tau * P <= 256); 2: "
                 "the same with size-aware GEMMs")
      ->check(CLI::IsMember({0, 1, 2}));
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
    ISER_CHECK(opt.iters >= 1 && opt.warmup >= 0, "-n {} / -w {}: need n >= 1, w >= 0", opt.iters,
               opt.warmup);
    const char* rank = std::getenv("ISER_BENCH_RANK");
    const char* world = std::getenv("ISER_BENCH_WORLD");
    const char* id_file = std::getenv("ISER_BENCH_ID_FILE");
    if (rank == nullptr || world == nullptr || id_file == nullptr) {
      make_routings(opt);  // bad routing flags are reported here, before any rank starts
      int devices = 0;
      ISER_CUDA_CHECK(cudaGetDeviceCount(&devices));
      ISER_CHECK(devices >= opt.num_ranks, "-P {}: only {} GPU(s) visible", opt.num_ranks, devices);
      std::vector<std::string> tail(reexec_prefix);
      tail.insert(tail.end(), args.begin(), args.end());
      return launch_ranks(opt.num_ranks, tail);
    }
    return run_rank(opt, std::atoi(rank), std::atoi(world), id_file);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench moe layer: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace iser::moe
