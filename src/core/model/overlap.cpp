// The paper's §3.1 peak-rate model of one MoE layer on one rank (docs/models.md, "Overlap").
#include <algorithm>
#include <cmath>

#include "iser/error.h"
#include "iser/model.h"

namespace iser::model {
namespace {

constexpr double kMicro = 1e6;
// Upper bounds that keep every product below 2^53 (exact in double) and reject typos early.
constexpr int kMaxEp = 1 << 16;
constexpr int64_t kMaxTokensPerRank = int64_t{1} << 30;
constexpr int kMaxCopies = 1 << 16;

}  // namespace

void OverlapConfig::validate() const {
  hw.validate();
  moe.validate();
  // Messages name OverlapConfig's fields; the CLI checks its flags before it calls here.
  ISER_CHECK(ep >= 2 && ep <= kMaxEp, "overlap model: invalid ep = {}: need 2 <= P <= {}", ep,
             kMaxEp);
  ISER_CHECK(tokens_per_rank >= 1 && tokens_per_rank <= kMaxTokensPerRank,
             "overlap model: invalid tokens_per_rank = {}: need 1 <= tau <= {}", tokens_per_rank,
             kMaxTokensPerRank);
  ISER_CHECK(copies >= 0 && copies <= kMaxCopies,
             "overlap model: invalid copies = {}: need 0 <= n <= {}", copies, kMaxCopies);
  hw.flops(routed);  // throws when the part lacks tensor cores for the routed precision
  if (moe.num_shared > 0) hw.flops(shared);
}

OverlapResult model_overlap(const OverlapConfig& config) {
  config.validate();
  const MoeShape& moe = config.moe;
  const double tau = static_cast<double>(config.tokens_per_rank);
  const double pairs = tau * moe.top_k;  // token-expert pairs made on this rank
  // NOTE: under uniform routing a pair leaves the rank with probability (P-1)/P; the model
  // counts one link direction, which carries the rank's outbound dispatch and combine traffic
  // (the inbound direction carries the same amounts).
  const double leave = static_cast<double>(config.ep - 1) / config.ep;
  const double b = element_bytes(config.routed);
  const double link = config.hw.link_bytes_per_s;
  const double f_routed = config.hw.flops(config.routed);

  OverlapResult out;
  // A gated MLP expert does three GEMMs of He x I per token: 3 * 2 He I FLOPs.
  out.routed_flops = 6.0 * pairs * moe.hidden * moe.intermediate;
  out.shared_flops = 6.0 * tau * moe.num_shared * moe.shared_hidden * moe.shared_intermediate;
  out.shared_weight = moe.num_shared > 0 ? f_routed / config.hw.flops(config.shared) : 0.0;
  out.dispatch_bytes = leave * pairs * moe.hidden * b;
  out.combine_bytes = leave * pairs * moe.hidden * element_bytes(config.combine);
  out.copy_bytes = 3.0 * moe.hidden * moe.intermediate * b;

  out.routed_us = out.routed_flops / f_routed * kMicro;
  out.shared_us =
      moe.num_shared > 0 ? out.shared_flops / config.hw.flops(config.shared) * kMicro : 0.0;
  out.dispatch_us = out.dispatch_bytes / link * kMicro;
  out.combine_us = out.combine_bytes / link * kMicro;
  out.dispatch_combine_us = out.dispatch_us + out.combine_us;
  out.copy_us = out.copy_bytes / link * kMicro;
  out.copies_us = config.copies * out.copy_us;

  const double comm_bytes = out.dispatch_bytes + out.combine_bytes + config.copies * out.copy_bytes;
  out.ratio_routed = out.routed_flops / comm_bytes;
  out.ratio_with_shared = (out.routed_flops + out.shared_weight * out.shared_flops) / comm_bytes;
  out.device_ratio = f_routed / link;
  out.above_device_routed = out.ratio_routed > out.device_ratio;
  out.above_device_with_shared = out.ratio_with_shared > out.device_ratio;

  out.copies_hidden_routed = std::max(0.0, out.routed_us - out.dispatch_combine_us) / out.copy_us;
  out.copies_hidden_shared = out.shared_us / out.copy_us;
  const double base_us = std::max(out.routed_us, out.dispatch_combine_us);
  out.exposed_routed_us =
      std::max(out.routed_us, out.dispatch_combine_us + out.copies_us) - base_us;
  const double spill_us = std::max(0.0, out.copies_us - out.shared_us);
  out.exposed_us = std::max(out.routed_us, out.dispatch_combine_us + spill_us) - base_us;
  out.token_exposed_us = std::max(0.0, out.dispatch_combine_us - out.routed_us);
  return out;
}

std::vector<OverlapScenario> sweep_overlap(const OverlapConfig& base,
                                           std::span<const MoeShape> models,
                                           std::span<const int64_t> tokens_per_rank,
                                           std::span<const int> copies) {
  ISER_CHECK(!models.empty() && !tokens_per_rank.empty() && !copies.empty(),
             "overlap sweep needs at least one model, one tokens/rank value and one copy count");
  std::vector<OverlapScenario> scenarios;
  scenarios.reserve(models.size() * tokens_per_rank.size() * copies.size());
  for (const MoeShape& moe : models) {
    for (const int64_t tau : tokens_per_rank) {
      for (const int n : copies) {
        OverlapConfig config = base;
        config.moe = moe;
        config.tokens_per_rank = tau;
        config.copies = n;
        scenarios.push_back({moe.name, tau, n, model_overlap(config)});
      }
    }
  }
  return scenarios;
}

}  // namespace iser::model
