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
  // Measured iterations only (the warm-up is planned but not kept).
  std::vector<std::vector<InvocationMetrics>> per_policy;
  std::vector<int64_t> installed_copies;  // per policy, summed over measured iterations
};

// config.layers holds layer ids (the trace's own, or 0..L-1 when it names none); returns the
// layer indices into the trace. With none selected: every layer that carries routes (a dense
// layer, no route at all, has no load to balance and would only dilute the means).
std::vector<int> resolve_layers(const ReplayConfig& config, const TraceMetadata& meta) {
  std::vector<int> indices;
  if (config.layers.empty()) {
    const auto& skip = meta.routeless_layers;
    for (int l = 0; l < meta.num_layers; ++l) {
      if (std::find(skip.begin(), skip.end(), l) == skip.end()) indices.push_back(l);
    }
    ISER_CHECK(!indices.empty(), "trace '{}': none of its {} layers carries a route", meta.source,
               meta.num_layers);
    return indices;
  }
  for (const int id : config.layers) {
    if (meta.layer_ids.empty()) {
      ISER_CHECK(id >= 0 && id < meta.num_layers, "layer {} out of range: the trace has {} layers",
                 id, meta.num_layers);
      indices.push_back(id);
      continue;
    }
    const auto it = std::find(meta.layer_ids.begin(), meta.layer_ids.end(), id);
    ISER_CHECK(it != meta.layer_ids.end(), "layer {} out of range: '{}' holds layers {}", id,
               meta.source, fmt::join(meta.layer_ids, ", "));
    indices.push_back(static_cast<int>(it - meta.layer_ids.begin()));
  }
  return indices;
}

// Position in the plan history of every served layer, matched by layer id.
std::vector<size_t> match_plan_layers(const PlanHistory& plan, const TraceMetadata& served,
                                      const std::vector<int>& layer_ids) {
  const TraceMetadata& pm = plan.metadata;
  ISER_CHECK(
      pm.num_experts == served.num_experts,
      "plan history (ReplayConfig::plan_history, --plan-trace) '{}' has E = {} experts but the "
      "served trace '{}' has {}",
      pm.source, pm.num_experts, served.source, served.num_experts);
  ISER_CHECK(
      pm.model.empty() || served.model.empty() || pm.model == served.model,
      "plan history (ReplayConfig::plan_history, --plan-trace) '{}' records model '{}' but the "
      "served trace '{}' records '{}'",
      pm.source, pm.model, served.source, served.model);
  std::vector<int> plan_ids(static_cast<size_t>(pm.num_layers));
  for (int l = 0; l < pm.num_layers; ++l) plan_ids[l] = pm.layer_id(l);
  std::vector<size_t> positions;
  for (const int id : layer_ids) {
    const auto it = std::find(plan_ids.begin(), plan_ids.end(), id);
    ISER_CHECK(it != plan_ids.end(),
               "plan history (ReplayConfig::plan_history, --plan-trace) '{}' has no layer {} (its "
               "layers: {}); the served trace '{}' needs it: pick common layers "
               "(ReplayConfig::layers, --layers)",
               pm.source, id,
               pm.layer_ids.empty() ? fmt::format("0..{}", pm.num_layers - 1)
                                    : fmt::format("{}", fmt::join(pm.layer_ids, ", ")),
               served.source);
    positions.push_back(static_cast<size_t>(it - plan_ids.begin()));
  }
  return positions;
}

// A whole-set histogram as a count matrix (row 0; scaled down to int32 when it must be:
// a static placement depends only on the relative loads).
CountMatrix history_matrix(std::span<const int64_t> hist, int num_ranks) {
  const int64_t max_count = hist.empty() ? 0 : *std::max_element(hist.begin(), hist.end());
  const int64_t divisor = std::max<int64_t>(1, (max_count + INT32_MAX - 1) / INT32_MAX);
  CountMatrix m(num_ranks, static_cast<int>(hist.size()));
  for (size_t e = 0; e < hist.size(); ++e) {
    m.row(0)[e] = static_cast<int32_t>(hist[e] / divisor);
  }
  return m;
}

bool plans_from_served_past(const std::string& policy, bool has_plan_history) {
  return policy == "eplb-window" ||
         (!has_plan_history && (policy == "eplb" || policy == "eplb-equal-mem"));
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
                    const ReplayResult& result, const std::vector<size_t>& plan_layer_pos,
                    LayerTask& task) {
  const int ep = config.ep_degrees[task.ep_idx];
  const int layer_idx = result.layers[task.layer_pos];
  const int64_t warmup = result.warmup_iterations;
  const int64_t num_iterations = warmup + result.iterations_per_ep[task.ep_idx];
  const Topology topo = Topology::make(ep, source.metadata().num_experts, config.num_slots,
                                       config.g_min, config.lsa_size);
  std::vector<CountMatrix> counts;
  counts.reserve(static_cast<size_t>(num_iterations));
  for (int64_t i = 0; i < num_iterations; ++i) {
    counts.push_back(source.counts(layer_idx, i, ep, config.tokens_per_rank));
  }
  const std::span<const CountMatrix> all(counts);
  std::vector<CountMatrix> plan_matrix;
  if (config.plan_history) {
    plan_matrix.push_back(
        history_matrix(config.plan_history->histograms[plan_layer_pos[task.layer_pos]], ep));
  }
  PolicyOptions options = config.policy_options;
  options.eplb_equal_mem_slots = result.equal_mem_slots;
  task.per_policy.resize(result.policies.size());
  task.installed_copies.assign(result.policies.size(), 0);
  for (size_t p = 0; p < result.policies.size(); ++p) {
    const std::string& name = result.policies[p];
    auto policy = make_policy(name, topo, options);
    // What a static placement may know: the plan history, else the served past (warm-up); the
    // oracle alone sees what it serves.
    if (name == "eplb-oracle") {
      policy->prepare(all.subspan(static_cast<size_t>(warmup)));
    } else if (is_static_policy(name)) {
      policy->prepare(plan_matrix.empty() ? all.first(static_cast<size_t>(warmup))
                                          : std::span<const CountMatrix>(plan_matrix));
    } else {
      policy->prepare({});
    }
    auto& metrics = task.per_policy[p];
    metrics.reserve(static_cast<size_t>(num_iterations - warmup));
    for (int64_t i = 0; i < num_iterations; ++i) {
      const PolicyResult planned = policy->plan(counts[i]);
      if (config.validate) validate_result(topo, counts[i], *policy, planned, layer_idx, i);
      if (i < warmup) continue;
      metrics.push_back(measure_invocation(topo, counts[i], planned));
      task.installed_copies[p] += planned.installed_copies;
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

// Memory and traffic of one policy on a model (see PolicySummary).
void add_costs(const ReplayCostModel& cost, const ReplayResult& result, PolicySummary& s) {
  const double W = cost.expert_bytes;
  const double S = result.config.num_slots;
  if (s.policy == "oracle") return;  // no placement: neither memory nor traffic is defined
  if (s.policy == "none") {
    s.extra_memory_bytes = 0;
    s.moved_bytes_per_invocation = 0;
  } else if (is_static_policy(s.policy)) {
    const double slots = s.policy == "eplb-equal-mem" ? result.equal_mem_slots : S;
    s.extra_memory_bytes = slots * cost.num_moe_layers * W;
    s.moved_bytes_per_invocation = s.installed_copies * W;
  } else {
    s.extra_memory_bytes = S * cost.banks * W;
    s.moved_bytes_per_invocation = (s.remote_copies + s.resident_copies) * W;
  }
}

PolicySummary summarize(const ReplayResult& result, size_t ep_idx, size_t policy_idx,
                        const std::vector<LayerTask>& tasks) {
  PolicySummary s;
  s.ep = result.config.ep_degrees[ep_idx];
  s.policy = result.policies[policy_idx];
  const size_t num_layers = result.layers.size();
  s.per_layer_mean_r_before.assign(num_layers, 0.0);
  s.per_layer_mean_r.assign(num_layers, 0.0);
  const auto num_measured = static_cast<size_t>(result.iterations_per_ep[ep_idx]);
  s.per_iteration_mean_r_before.assign(num_measured, 0.0);
  s.per_iteration_mean_r.assign(num_measured, 0.0);
  int64_t installed = 0;
  std::vector<int32_t> payloads;
  double sum_r_before = 0, sum_r = 0, sum_so_before = 0, sum_ri_before = 0, sum_so = 0, sum_ri = 0,
         sum_bc = 0, sum_rc = 0, sum_res = 0;
  int64_t owner_outside = 0, broadcasts = 0;
  for (const LayerTask& task : tasks) {
    if (task.ep_idx != ep_idx) continue;
    const auto& metrics = task.per_policy[policy_idx];
    installed += task.installed_copies[policy_idx];
    double layer_r_before = 0, layer_r = 0;
    for (size_t j = 0; j < metrics.size(); ++j) {
      const InvocationMetrics& m = metrics[j];
      s.per_iteration_mean_r_before[j] += m.r_before / static_cast<double>(num_layers);
      s.per_iteration_mean_r[j] += m.r_after / static_cast<double>(num_layers);
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
  s.installed_copies = static_cast<double>(installed) / n;
  if (const auto& cost = result.config.cost_model) add_costs(*cost, result, s);
  return s;
}

}  // namespace

ReplayResult run_replay(const RoutingSource& source, const ReplayConfig& config) {
  const TraceMetadata& meta = source.metadata();
  // Library messages name ReplayConfig's fields; the CLI checks its flags before it calls here.
  ISER_CHECK(!config.ep_degrees.empty(), "replay: no EP degree given (ep_degrees is empty)");
  ISER_CHECK(config.tokens_per_rank > 0, "replay: tokens_per_rank = {} (need >= 1)",
             config.tokens_per_rank);
  ISER_CHECK(config.num_slots >= 0, "replay: num_slots = {} (need S >= 0)", config.num_slots);
  ReplayResult result;
  result.config = config;
  result.metadata = meta;
  result.layers = resolve_layers(config, meta);
  for (const int l : result.layers) result.layer_ids.push_back(meta.layer_id(l));
  result.policies = config.policies.empty() ? default_replay_policies() : config.policies;
  if (config.policies.empty() && !config.cost_model) {
    // Without a model there is no memory to equalise: the default set drops that comparison.
    std::erase(result.policies, std::string("eplb-equal-mem"));
  }
  std::vector<size_t> plan_layer_pos;
  if (config.plan_history) {
    plan_layer_pos = match_plan_layers(*config.plan_history, meta, result.layer_ids);
  }
  const bool has_history = config.plan_history.has_value();
  const bool needs_past =
      std::any_of(result.policies.begin(), result.policies.end(),
                  [&](const std::string& p) { return plans_from_served_past(p, has_history); });
  const int window = config.policy_options.eplb_window > 0 ? config.policy_options.eplb_window : 8;
  result.warmup_iterations = config.warmup.value_or(needs_past ? window : 0);
  ISER_CHECK(result.warmup_iterations >= 0, "replay: warmup = {} (need >= 0)",
             result.warmup_iterations);
  for (const auto& p : result.policies) {
    ISER_CHECK(!(plans_from_served_past(p, has_history) && p != "eplb-window" &&
                 result.warmup_iterations == 0),
               "policy {} plans from the past: give it a history (ReplayConfig::plan_history, "
               "--plan-trace FILE) or warm-up iterations (ReplayConfig::warmup >= 1, --warmup N: "
               "the first N iterations, left out of every mean)",
               p);
  }
  if (std::find(result.policies.begin(), result.policies.end(), "eplb-equal-mem") !=
      result.policies.end()) {
    ISER_CHECK(config.cost_model.has_value(),
               "policy eplb-equal-mem needs a model (ReplayConfig::cost_model, --model) to size "
               "its memory");
    // The slots a layer gets from the memory the shared banks use, spread over every layer.
    result.equal_mem_slots =
        config.num_slots * config.cost_model->banks / config.cost_model->num_moe_layers;
  }
  for (const int ep : config.ep_degrees) {
    // Validates P, E, S, g_min and lsa_size before any work (clear error naming the value).
    const Topology topo =
        Topology::make(ep, meta.num_experts, config.num_slots, config.g_min, config.lsa_size);
    for (const auto& name : result.policies) make_policy(name, topo, config.policy_options);
    const auto available = source.num_iterations(ep, config.tokens_per_rank);
    const int64_t warmup = result.warmup_iterations;
    int64_t iterations = available ? *available - warmup : kDefaultSampledIterations;
    if (config.iterations) {
      ISER_CHECK(*config.iterations > 0, "replay: iterations = {} (need >= 1)", *config.iterations);
      iterations =
          available ? std::min(*available - warmup, *config.iterations) : *config.iterations;
    }
    ISER_CHECK(available.value_or(1) > 0,
               "trace '{}' has too few tokens for one iteration at EP{} x {} tokens per rank "
               "({} tokens dropped); lower ReplayConfig::tokens_per_rank (--tokens-per-rank)",
               meta.source, ep, config.tokens_per_rank,
               source.dropped_tokens(ep, config.tokens_per_rank));
    ISER_CHECK(iterations > 0,
               "trace '{}' has {} iteration(s) at EP{} x {} tokens per rank, none left after "
               "{} warm-up iteration(s); lower ReplayConfig::warmup or tokens_per_rank (--warmup, "
               "--tokens-per-rank)",
               meta.source, available.value_or(0), ep, config.tokens_per_rank, warmup);
    if (config.projection) config.projection->validate();
    result.iterations_per_ep.push_back(iterations);
    result.dropped_tokens_per_ep.push_back(source.dropped_tokens(ep, config.tokens_per_rank));
  }

  std::vector<LayerTask> tasks;
  for (size_t e = 0; e < config.ep_degrees.size(); ++e) {
    for (size_t l = 0; l < result.layers.size(); ++l) tasks.push_back({e, l, {}, {}});
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
        run_layer_task(source, config, result, plan_layer_pos, tasks[t]);
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
