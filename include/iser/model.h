// Analytic models for hardware we cannot touch (paper §3.1, §3.3, §4.3; docs/models.md):
//  - the peak-rate overlap model: per MoE layer and rank, how many expert copies hide beside the
//    routed experts and beside the shared expert;
//  - broadcast models: algorithm bandwidth of a ring, scatter + all-gather, single-port multicast
//    and SAMI (multi-port multicast) broadcast of one expert to g GPUs;
//  - layer-time projections t = intercept + slope * R (the paper's GB200 fit, or a measured one).
// Units: FLOP/s, bytes/s, bytes and seconds internally; results carry microseconds where named
// `*_us`. Every entry point validates its inputs and throws iser::Error naming the bad field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace iser::model {

// ---- number formats ------------------------------------------------------------------------

enum class Precision { kFp4, kFp8, kBf16 };

// "fp4" | "fp8" | "bf16"; anything else throws naming `field`.
Precision parse_precision(std::string_view text, std::string_view field);
std::string_view precision_name(Precision precision);
// Bytes per element on the wire and in weights: NVFP4 = 4 bits + one FP8 scale per 16 elements
// = 0.5625 B; FP8 = 1 B (block scales neglected); BF16 = 2 B.
double element_bytes(Precision precision);

// ---- hardware ------------------------------------------------------------------------------

struct Hardware {
  std::string name;
  double fp4_flops = 0;         // dense FP4 tensor FLOP/s per GPU; 0 = no FP4 tensor cores
  double fp8_flops = 0;         // dense FP8 tensor FLOP/s per GPU
  double bf16_flops = 0;        // dense BF16 tensor FLOP/s per GPU
  double link_bytes_per_s = 0;  // NVLink bandwidth per GPU and direction
  std::string source;           // where the figures come from (docs/models.md has the detail)

  // Dense FLOP/s at `precision`; throws when the part has no tensor cores for it.
  double flops(Precision precision) const;
  // Throws unless every rate is finite and >= 0, FP8/BF16 and the link are > 0.
  void validate() const;
};

// H100, H200, B200, GB200, GB300, VR200 (names are matched case-insensitively).
std::span<const Hardware> hardware_presets();
const Hardware& find_hardware(std::string_view name);

// ---- MoE layer shapes ----------------------------------------------------------------------

struct MoeShape {
  std::string name;
  int64_t hidden = 0;         // He: the routed experts' input width (latent width for latent MoE)
  int64_t intermediate = 0;   // I: routed expert intermediate size
  int num_experts = 0;        // E
  int top_k = 0;              // k
  int num_shared = 0;         // shared experts, each processing every token
  int64_t shared_hidden = 0;  // shared experts' input width (the full hidden size)
  int64_t shared_intermediate = 0;  // shared expert intermediate size
  std::string source;

  void validate() const;  // positive sizes, 1 <= k <= E, shared sizes > 0 when num_shared > 0
};

// deepseek-v4-pro, deepseek-v3, kimi-k3 (case-insensitive).
std::span<const MoeShape> moe_presets();
const MoeShape& find_moe(std::string_view name);

// ---- §3.1 peak-rate overlap model ----------------------------------------------------------

struct OverlapConfig {
  Hardware hw;
  MoeShape moe;
  int ep = 8;                           // P
  int64_t tokens_per_rank = 8192;       // tau, before top-k expansion
  int copies = 0;                       // n expert copies the rank sends or receives
  Precision routed = Precision::kFp4;   // routed GEMMs, dispatched tokens and copied weights
  Precision combine = Precision::kFp4;  // combined (returned) tokens
  Precision shared = Precision::kFp8;   // shared-expert GEMMs

  void validate() const;
};

// Everything per MoE layer and rank, at peak rates and under uniform routing.
struct OverlapResult {
  double routed_flops = 0;    // 6 tau k He I
  double shared_flops = 0;    // 6 tau n_s He_s I_s
  double shared_weight = 0;   // F_routed / F_shared (3 for FP8 on GB300, 2 on VR200)
  double dispatch_bytes = 0;  // (P-1)/P tau k He b, one direction
  double combine_bytes = 0;   // (P-1)/P tau k He b_combine, one direction
  double copy_bytes = 0;      // W = 3 He I b, one expert
  double routed_us = 0;
  double shared_us = 0;
  double dispatch_us = 0;
  double combine_us = 0;
  double dispatch_combine_us = 0;
  double copy_us = 0;            // one copy at line rate
  double copies_us = 0;          // n copies
  double ratio_routed = 0;       // routed FLOP per byte on a link direction, with the n copies
  double ratio_with_shared = 0;  // (routed + weight * shared FLOP) per byte, with the n copies
  double device_ratio = 0;       // F_routed / B_link
  bool above_device_routed = false;
  bool above_device_with_shared = false;
  double copies_hidden_routed = 0;  // max(0, routed - dispatch_combine) / copy
  double copies_hidden_shared = 0;  // shared / copy: the links are idle during the shared expert
  // Time the n copies add to the layer beyond the token traffic, when they run beside the routed
  // experts only (from MegaMoE's entry): max(routed, dc + n W/B) - max(routed, dc).
  double exposed_routed_us = 0;
  // The same when copies start beside the shared expert and spill into the routed phase:
  // max(routed, dc + max(0, nW/B - shared)) - max(routed, dc).
  double exposed_us = 0;
  // Token traffic that computation cannot hide even without copies: max(0, dc - routed).
  double token_exposed_us = 0;
};

OverlapResult model_overlap(const OverlapConfig& config);

struct OverlapScenario {
  std::string model;
  int64_t tokens_per_rank = 0;
  int copies = 0;
  OverlapResult result;
};

// The paper's Figure 3 grid: every model x tokens/rank x copies, in that nesting order; `base`
// supplies hardware, EP degree and precisions.
std::vector<OverlapScenario> sweep_overlap(const OverlapConfig& base,
                                           std::span<const MoeShape> models,
                                           std::span<const int64_t> tokens_per_rank,
                                           std::span<const int> copies);

// ---- §3.3 / §4.3 broadcast models ----------------------------------------------------------

enum class BroadcastAlgo { kRing, kScatterAllGather, kSinglePort, kSami };
inline constexpr BroadcastAlgo kBroadcastAlgos[] = {
    BroadcastAlgo::kRing, BroadcastAlgo::kScatterAllGather, BroadcastAlgo::kSinglePort,
    BroadcastAlgo::kSami};
std::string_view broadcast_algo_name(BroadcastAlgo algo);  // ring, scatter_allgather, ...

struct BroadcastConfig {
  double bytes = 0;                       // W, one expert's bundle
  double link_bytes_per_s = 900e9;        // B_link per direction
  double alpha_s = 5e-6;                  // latency per step
  double ring_slice_bytes = 2 << 20;      // c, the ring's pipeline slice
  double port_rate_bytes_per_s = 2.1e12;  // measured multicast output of one ingress port
  double sami_slice_bytes = 8 << 10;      // SAMI's pipeline slice (the TMA kernel's 8 KiB)

  void validate() const;
};

// Broadcast time of W bytes from one owner to g >= 2 GPUs, in seconds.
double broadcast_time_s(const BroadcastConfig& config, BroadcastAlgo algo, int group_size);
// Algorithm bandwidth W / time, in bytes/s.
double broadcast_bandwidth(const BroadcastConfig& config, BroadcastAlgo algo, int group_size);

struct BroadcastPoint {
  int group_size = 0;
  double time_s[4] = {};  // indexed by BroadcastAlgo
  double bandwidth_bytes_per_s[4] = {};
};
std::vector<BroadcastPoint> broadcast_sweep(const BroadcastConfig& config, int g_min, int g_max);

// ---- layer-time projection -----------------------------------------------------------------

// A layer's kernel time as a linear function of its rank imbalance R: t = intercept + slope R.
struct LayerTimeFit {
  std::string name;
  double intercept_us = 0;
  double slope_us = 0;
  int ep = 0;                   // EP degree it was measured at (0 = unspecified)
  int64_t tokens_per_rank = 0;  // tokens/rank it was measured at (0 = unspecified)
  std::string source;

  void validate() const;
  // t(R) in microseconds; R must be finite and >= 1 (and <= ep when ep is known).
  double project_us(double r) const;
};

// "gb200-ep8": the paper's MegaMoE fit on GB200, EP8, 8,192 tokens/rank (t = 513 + 1051 R).
std::span<const LayerTimeFit> layer_time_presets();
// JSON object {"name", "intercept_us", "slope_us", "ep", "tokens_per_rank"} ("ep",
// "tokens_per_rank", "source" optional); `origin` names the file in error messages.
LayerTimeFit parse_layer_time_fit(std::string_view json_text, std::string_view origin);
LayerTimeFit load_layer_time_fit(const std::filesystem::path& path);
std::string layer_time_fit_json(const LayerTimeFit& fit);
// A preset name, or else a path to a JSON file.
LayerTimeFit find_layer_time_fit(std::string_view name_or_path);
// Least-squares line through measured (R, t) points (at least two distinct R values).
LayerTimeFit fit_layer_time(std::span<const double> r, std::span<const double> t_us,
                            std::string name);

}  // namespace iser::model
