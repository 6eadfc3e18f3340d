// Hardware and MoE-shape presets of the models (docs/models.md gives each figure's source).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "iser/error.h"
#include "iser/model.h"
#include "model/names.h"

namespace iser::model {
namespace {

constexpr double kTera = 1e12;
constexpr double kPeta = 1e15;
constexpr double kGB = 1e9;

// NOTE: all FLOP/s figures are dense (NVIDIA's datasheets quote tensor FLOP/s with 2:4 sparsity;
// dense is half of those) and per GPU; link bandwidth is per GPU and per direction (NVIDIA
// quotes the bidirectional total).
const Hardware kHardware[] = {
    {"H100", 0, 1979 * kTera, 989 * kTera, 450 * kGB,
     "NVIDIA H100 SXM datasheet: FP8 3,958 / BF16 1,979 TFLOP/s sparse; NVLink 4 900 GB/s total; "
     "no FP4"},
    {"H200", 0, 1979 * kTera, 989 * kTera, 450 * kGB,
     "NVIDIA H200 SXM datasheet: FP8 3,958 / BF16 1,979 TFLOP/s sparse; NVLink 4 900 GB/s total; "
     "no FP4"},
    {"B200", 9 * kPeta, 4.5 * kPeta, 2.25 * kPeta, 900 * kGB,
     "NVIDIA HGX B200 (8 GPUs): FP4 144 / FP8 72 / BF16 36 PFLOP/s sparse; NVLink 5 1.8 TB/s "
     "total per GPU"},
    {"GB200", 10 * kPeta, 5 * kPeta, 2.5 * kPeta, 900 * kGB,
     "NVIDIA GB200 NVL72 (72 GPUs): FP4 1,440 / FP8 720 / BF16 360 PFLOP/s sparse; NVLink 5 "
     "1.8 TB/s total per GPU"},
    {"GB300", 15 * kPeta, 5 * kPeta, 2.5 * kPeta, 900 * kGB,
     "paper §3.1 [18]: 15 PFLOP/s dense FP4, FP8 at one third, 900 GB/s per direction; BF16 from "
     "the GB300 NVL72 datasheet (360 PFLOP/s sparse / 72)"},
    {"VR200", 35 * kPeta, 17.5 * kPeta, 8.75 * kPeta, 1500 * kGB,
     "paper §3.1 [21]: 35 PFLOP/s FP4, FP8 at half, 1.5 TB/s per direction (rack datasheet); "
     "BF16 assumed half of FP8 (not published); NVIDIA's NVLink 6 figure is 3.6 TB/s total"},
};

const MoeShape kMoeShapes[] = {
    {"deepseek-v4-pro", 7168, 3072, 384, 6, 1, 7168, 3072,
     "paper §2.2/§3.1: He 7168, I 3072, E 384, k 6, one shared expert"},
    {"deepseek-v3", 7168, 2048, 256, 8, 1, 7168, 2048,
     "DeepSeek-V3 config.json: hidden 7168, moe_intermediate 2048, 256 routed experts, top-8, "
     "one shared expert"},
    {"kimi-k3", 3584, 3072, 896, 16, 2, 7168, 3072,
     "paper §3.1 [14]: latent MoE, top-16 of 896, latent He 3584, I 3072; two shared experts on "
     "the full hidden size 7168 with I 3072"},
};

}  // namespace

bool names_equal(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

Precision parse_precision(std::string_view text, std::string_view field) {
  if (names_equal(text, "fp4") || names_equal(text, "nvfp4")) return Precision::kFp4;
  if (names_equal(text, "fp8")) return Precision::kFp8;
  if (names_equal(text, "bf16")) return Precision::kBf16;
  throw Error(fmt::format("invalid {} '{}': expected fp4, fp8 or bf16", field, text));
}

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp4:
      return "fp4";
    case Precision::kFp8:
      return "fp8";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

double element_bytes(Precision precision) {
  switch (precision) {
    case Precision::kFp4:
      return 0.5625;  // 4 bits + one 8-bit scale per 16 elements
    case Precision::kFp8:
      return 1.0;
    case Precision::kBf16:
      return 2.0;
  }
  return 0;
}

double Hardware::flops(Precision precision) const {
  const double rate = precision == Precision::kFp4   ? fp4_flops
                      : precision == Precision::kFp8 ? fp8_flops
                                                     : bf16_flops;
  ISER_CHECK(rate > 0,
             "hardware '{}' has no {} tensor cores (dense {} FLOP/s = 0); choose "
             "another precision or set the rate",
             name, precision_name(precision), precision_name(precision));
  return rate;
}

void Hardware::validate() const {
  const auto check_rate = [&](double value, std::string_view field, bool may_be_zero) {
    ISER_CHECK(std::isfinite(value) && (may_be_zero ? value >= 0 : value > 0),
               "hardware '{}': invalid {} = {}: need a finite value {} 0", name, field, value,
               may_be_zero ? ">=" : ">");
  };
  check_rate(fp4_flops, "fp4 FLOP/s", true);
  check_rate(fp8_flops, "fp8 FLOP/s", false);
  check_rate(bf16_flops, "bf16 FLOP/s", false);
  check_rate(link_bytes_per_s, "link bandwidth", false);
}

std::span<const Hardware> hardware_presets() {
  return kHardware;
}

const Hardware& find_hardware(std::string_view name) {
  return find_preset(hardware_presets(), name, "hardware");
}

void MoeShape::validate() const {
  const auto positive = [&](int64_t value, std::string_view field) {
    ISER_CHECK(value > 0, "model '{}': invalid {} = {}: need > 0", name, field, value);
  };
  positive(hidden, "hidden size He");
  positive(intermediate, "intermediate size I");
  positive(num_experts, "number of experts E");
  ISER_CHECK(top_k >= 1 && top_k <= num_experts,
             "model '{}': invalid top-k k = {}: need 1 <= k <= E = {}", name, top_k, num_experts);
  ISER_CHECK(num_shared >= 0, "model '{}': invalid shared experts = {}: need >= 0", name,
             num_shared);
  if (num_shared > 0) {
    positive(shared_hidden, "shared hidden size");
    positive(shared_intermediate, "shared intermediate size");
  }
}

std::span<const MoeShape> moe_presets() {
  return kMoeShapes;
}

const MoeShape& find_moe(std::string_view name) {
  return find_preset(moe_presets(), name, "model");
}

}  // namespace iser::model
