// Broadcast models of §3.3 (ring, scatter + all-gather, single-port multicast) and §4.3 (SAMI);
// docs/models.md derives each formula.
#include <algorithm>
#include <cmath>

#include "iser/error.h"
#include "iser/model.h"

namespace iser::model {
namespace {

constexpr int kMaxGroup = 1 << 16;

void check_positive(double value, std::string_view field) {
  ISER_CHECK(std::isfinite(value) && value > 0,
             "invalid broadcast {} = {}: need a finite value > 0", field, value);
}

}  // namespace

std::string_view broadcast_algo_name(BroadcastAlgo algo) {
  switch (algo) {
    case BroadcastAlgo::kRing:
      return "ring";
    case BroadcastAlgo::kScatterAllGather:
      return "scatter_allgather";
    case BroadcastAlgo::kSinglePort:
      return "single_port";
    case BroadcastAlgo::kSami:
      return "sami";
  }
  return "?";
}

void BroadcastConfig::validate() const {
  // Messages name BroadcastConfig's fields; the CLI checks its flags before it calls here.
  check_positive(bytes, "bytes");
  check_positive(link_bytes_per_s, "link_bytes_per_s");
  ISER_CHECK(std::isfinite(alpha_s) && alpha_s >= 0,
             "invalid broadcast alpha_s = {} s: need a finite value >= 0", alpha_s);
  check_positive(ring_slice_bytes, "ring_slice_bytes");
  check_positive(port_rate_bytes_per_s, "port_rate_bytes_per_s");
  check_positive(sami_slice_bytes, "sami_slice_bytes");
}

double broadcast_time_s(const BroadcastConfig& config, BroadcastAlgo algo, int group_size) {
  config.validate();
  ISER_CHECK(group_size >= 2 && group_size <= kMaxGroup,
             "invalid broadcast group size g = {}: need 2 <= g <= {}", group_size, kMaxGroup);
  const double w = config.bytes;
  const double link = config.link_bytes_per_s;
  const double g = group_size;
  switch (algo) {
    case BroadcastAlgo::kRing: {
      // T_A = W/B + (g-1) alpha + (g-2) c/B: the payload crosses each link once, and the last
      // member receives its first slice after g-2 store-and-forward hops. A slice larger than
      // the payload is the payload itself (no pipelining).
      const double slice = std::min(config.ring_slice_bytes, w);
      return w / link + (g - 1) * config.alpha_s + (g - 2) * slice / link;
    }
    case BroadcastAlgo::kScatterAllGather:
      // T_B = 2 (g-1)/g W/B + 2 alpha: each port injects (g-1)/g W twice in series.
      return 2.0 * (g - 1) / g * w / link + 2.0 * config.alpha_s;
    case BroadcastAlgo::kSinglePort:
      // T_C = max(W/B, g W / R_port) + alpha: the owner injects W once; the switch replicates it
      // from that one ingress port at the measured total output rate R_port.
      return std::max(w / link, g * w / config.port_rate_bytes_per_s) + config.alpha_s;
    case BroadcastAlgo::kSami: {
      // Member i pulls W/g from the owner (s1) and multicasts it (s2); the switch delivers every
      // slice to every member (s3). Per port: the owner sends W; a member injects W/g, whose
      // multicast output is W (so one port's replication rate R_port bounds W / R_port); a
      // non-owner member receives W + W/g. Two pipelined steps cost 2 alpha plus one slice of
      // fill.
      const double ingress_s = (1.0 + 1.0 / g) * w / link;
      const double replicate_s = w / config.port_rate_bytes_per_s;
      const double slice = std::min(config.sami_slice_bytes, w / g);
      return std::max(ingress_s, replicate_s) + 2.0 * config.alpha_s + slice / link;
    }
  }
  throw Error("unknown broadcast algorithm");
}

double broadcast_bandwidth(const BroadcastConfig& config, BroadcastAlgo algo, int group_size) {
  return config.bytes / broadcast_time_s(config, algo, group_size);
}

std::vector<BroadcastPoint> broadcast_sweep(const BroadcastConfig& config, int g_min, int g_max) {
  ISER_CHECK(g_min >= 2 && g_min <= g_max && g_max <= kMaxGroup,
             "invalid broadcast group range {}..{}: need 2 <= g_min <= g_max <= {}", g_min, g_max,
             kMaxGroup);
  std::vector<BroadcastPoint> points;
  for (int g = g_min; g <= g_max; ++g) {
    BroadcastPoint point;
    point.group_size = g;
    for (const BroadcastAlgo algo : kBroadcastAlgos) {
      const auto idx = static_cast<size_t>(algo);
      point.time_s[idx] = broadcast_time_s(config, algo, g);
      point.bandwidth_bytes_per_s[idx] = config.bytes / point.time_s[idx];
    }
    points.push_back(point);
  }
  return points;
}

}  // namespace iser::model
