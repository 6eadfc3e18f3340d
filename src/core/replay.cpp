#include "iser/replay.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "iser/error.h"
#include "iser/metrics.h"
#include "iser/validator.h"

namespace iser {
namespace {

// Metrics of every invocation of one (EP degree, layer), per policy, in iteration order.
struct LayerTask {
  size_t ep_idx = 0;
  size_t layer_pos = 0;  // index into ReplayResult::layers
  std::vector<std::vector<InvocationMetrics>> per_policy;
};

// All layers that carry routes unless layers are selected explicitly: a dense layer (no route
// at all) has no load to balance and would only dilute the means.
std::vector<int> resolve_layers(const ReplayConfig& config, const TraceMetadata& meta) {
  const int num_layers = meta.num_layers;
  if (config.layers.empty()) {
    std::vector<int> all;
    for (int l = 0; l < num_layers; ++l) {
      const auto& skip = meta.routeless_layers;
      if (std::find(skip.begin(), skip.end(), l) == skip.end()) all.push_back(l);
    }
    ISER_CHECK(!all.empty(), "trace '{}': none of its {} layers carries a route", meta.source,
               num_layers);
    return all;
  }
  for (const int l : config.layers) {
    ISER_CHECK(l >= 0 && l < num_layers, "layer {} out of range: the trace has {} layers", l,
               num_layers);
  }
  return config.layers;
}

void validate_result(const Topology& topo, const CountMatrix& counts, const Policy& policy,
                     const PolicyResult& result, int layer_idx, int64_t iteration_idx) {
  std::vector<std::string> violations;
  const ValidationOptions options = policy.validation();
  if (options.enabled) violations = validate_plan(topo, counts, result.plan, options);
  if (result.has_flows) {
    auto flow_violations = validate_flows(counts, result.flows);
    violations.insert(violations.end(), flow_violations.begin(), flow_violations.end());
  }
  if (violations.empty()) return;
  std::string message = fmt::format(
      "policy '{}' produced an invalid plan at EP{} layer {} iteration {}:", policy.name(),
      topo.num_ranks, layer_idx, iteration_idx);
  for (size_t i = 0; i < violations.size() && i < 5; ++i) message += "\n  " + violations[i];
  throw Error(message);
}

void run_layer_task(const RoutingSource& source, const ReplayConfig& config,
                    const ReplayResult& result, LayerTask& task) {
  const int ep = config.ep_degrees[task.ep_idx];
  const int layer_idx = result.layers[task.layer_pos];
  const int64_t num_iterations = result.iterations_per_ep[task.ep_idx];
  const Topology topo =
      Topology::make(ep, source.metadata().num_experts, config.num_slots, config.g_min);
  std::vector<CountMatrix> counts;
  counts.reserve(static_cast<size_t>(num_iterations));
  for (int64_t i = 0; i < num_iterations; ++i) {
    counts.push_back(source.counts(layer_idx, i, ep, config.tokens_per_rank));
  }
  task.per_policy.resize(result.policies.size());
  for (size_t p = 0; p < result.policies.size(); ++p) {
    auto policy = make_policy(result.policies[p], topo, config.policy_options);
    policy->prepare(counts);
    auto& metrics = task.per_policy[p];
    metrics.reserve(counts.size());
    for (int64_t i = 0; i < num_iterations; ++i) {
      const PolicyResult planned = policy->plan(counts[i]);
      if (config.validate) validate_result(topo, counts[i], *policy, planned, layer_idx, i);
      metrics.push_back(measure_invocation(topo, counts[i], planned));
    }
  }
}

// Nearest-rank percentile of a sorted sample.
double percentile(const std::vector<int32_t>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double median(const std::vector<int32_t>& sorted) {
  if (sorted.empty()) return 0.0;
  const size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

PolicySummary summarize(const ReplayResult& result, size_t ep_idx, size_t policy_idx,
                        const std::vector<LayerTask>& tasks) {
  PolicySummary s;
  s.ep = result.config.ep_degrees[ep_idx];
  s.policy = result.policies[policy_idx];
  const size_t num_layers = result.layers.size();
  s.per_layer_mean_r_before.assign(num_layers, 0.0);
  s.per_layer_mean_r.assign(num_layers, 0.0);
  std::vector<int32_t> payloads;
  double sum_r_before = 0, sum_r = 0, sum_so_before = 0, sum_ri_before = 0, sum_so = 0, sum_ri = 0,
         sum_bc = 0, sum_rc = 0, sum_res = 0;
  int64_t owner_outside = 0, broadcasts = 0;
  for (const LayerTask& task : tasks) {
    if (task.ep_idx != ep_idx) continue;
    const auto& metrics = task.per_policy[policy_idx];
    double layer_r_before = 0, layer_r = 0;
    for (const InvocationMetrics& m : metrics) {
      ++s.invocations;
      layer_r_before += m.r_before;
      layer_r += m.r_after;
      sum_so_before += static_cast<double>(m.max_send_out_before);
      sum_ri_before += static_cast<double>(m.max_receive_in_before);
      if (m.max_send_out < 0) s.has_flows = false;
      sum_so += static_cast<double>(m.max_send_out);
      sum_ri += static_cast<double>(m.max_receive_in);
      sum_bc += m.num_broadcasts;
      sum_rc += m.remote_copies;
      sum_res += m.resident_copies;
      broadcasts += m.num_broadcasts;
      owner_outside += m.owner_outside_broadcasts;
      payloads.push_back(m.max_owner_payloads);
    }
    if (!metrics.empty()) {
      s.per_layer_mean_r_before[task.layer_pos] = layer_r_before / metrics.size();
      s.per_layer_mean_r[task.layer_pos] = layer_r / metrics.size();
    }
    sum_r_before += layer_r_before;
    sum_r += layer_r;
  }
  if (s.invocations == 0) return s;
  const double n = static_cast<double>(s.invocations);
  s.mean_r_before = sum_r_before / n;
  s.mean_r = sum_r / n;
  s.excess_removed =
      s.mean_r_before > 1.0 ? (s.mean_r_before - s.mean_r) / (s.mean_r_before - 1.0) : 0.0;
  s.max_send_out_before = sum_so_before / n;
  s.max_receive_in_before = sum_ri_before / n;
  s.max_send_out = s.has_flows ? sum_so / n : -1.0;
  s.max_receive_in = s.has_flows ? sum_ri / n : -1.0;
  s.broadcasts = sum_bc / n;
  s.remote_copies = sum_rc / n;
  s.resident_copies = sum_res / n;
  std::sort(payloads.begin(), payloads.end());
  s.owner_payloads_median = median(payloads);
  s.owner_payloads_p99 = percentile(payloads, 0.99);
  s.owner_payloads_max = payloads.back();
  if (const auto& fit = result.config.projection) {
    // The fit is linear in R, so the mean projected time is the projection of the mean R.
    s.projected_us_before = fit->intercept_us + fit->slope_us * s.mean_r_before;
    s.projected_us = fit->intercept_us + fit->slope_us * s.mean_r;
  }
  s.owner_outside_fraction =
      broadcasts ? static_cast<double>(owner_outside) / static_cast<double>(broadcasts) : 0.0;
  return s;
}

}  // namespace

ReplayResult run_replay(const RoutingSource& source, const ReplayConfig& config) {
  const TraceMetadata& meta = source.metadata();
  ISER_CHECK(!config.ep_degrees.empty(), "replay: no EP degree given (--ep)");
  ISER_CHECK(config.tokens_per_rank > 0, "replay: invalid --tokens-per-rank {}",
             config.tokens_per_rank);
  ISER_CHECK(config.num_slots >= 0, "replay: invalid --slots {} (need S >= 0)", config.num_slots);
  ReplayResult result;
  result.config = config;
  result.metadata = meta;
  result.layers = resolve_layers(config, meta);
  result.policies = config.policies.empty() ? available_policies() : config.policies;
  for (const int ep : config.ep_degrees) {
    // Validates P, E, S and g_min before any work (clear error naming the value).
    const Topology topo = Topology::make(ep, meta.num_experts, config.num_slots, config.g_min);
    for (const auto& name : result.policies) make_policy(name, topo, config.policy_options);
    const auto available = source.num_iterations(ep, config.tokens_per_rank);
    int64_t iterations = available ? *available : kDefaultSampledIterations;
    if (config.iterations) {
      ISER_CHECK(*config.iterations > 0, "replay: invalid --iterations {}", *config.iterations);
      iterations = available ? std::min(*available, *config.iterations) : *config.iterations;
    }
    ISER_CHECK(iterations > 0,
               "trace '{}' has too few tokens for one iteration at EP{} x {} tokens per rank "
               "({} tokens dropped); lower --tokens-per-rank",
               meta.source, ep, config.tokens_per_rank,
               source.dropped_tokens(ep, config.tokens_per_rank));
    if (config.projection) config.projection->validate();
    result.iterations_per_ep.push_back(iterations);
    result.dropped_tokens_per_ep.push_back(source.dropped_tokens(ep, config.tokens_per_rank));
  }

  std::vector<LayerTask> tasks;
  for (size_t e = 0; e < config.ep_degrees.size(); ++e) {
    for (size_t l = 0; l < result.layers.size(); ++l) tasks.push_back({e, l, {}});
  }
  // Larger EP degrees cost more: start them first so the threads finish together.
  std::stable_sort(tasks.begin(), tasks.end(), [&](const LayerTask& a, const LayerTask& b) {
    return config.ep_degrees[a.ep_idx] > config.ep_degrees[b.ep_idx];
  });
  const int64_t total = static_cast<int64_t>(tasks.size());
  std::atomic<int64_t> next{0}, done{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&] {
    for (int64_t t = next++; t < total; t = next++) {
      try {
        run_layer_task(source, config, result, tasks[t]);
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = total;  // stop handing out work
        return;
      }
      const int64_t finished = ++done;
      if (config.progress) config.progress(finished, total);
    }
  };
  const int num_threads = std::max<int>(
      1, std::min<int64_t>(total, config.num_threads > 0
                                      ? config.num_threads
                                      : static_cast<int>(std::thread::hardware_concurrency())));
  {
    std::vector<std::jthread> threads;
    for (int i = 1; i < num_threads; ++i) threads.emplace_back(worker);
    worker();
  }
  if (failure) std::rethrow_exception(failure);

  for (size_t e = 0; e < config.ep_degrees.size(); ++e) {
    for (size_t p = 0; p < result.policies.size(); ++p) {
      result.results.push_back(summarize(result, e, p, tasks));
    }
  }
  return result;
}

}  // namespace iser
