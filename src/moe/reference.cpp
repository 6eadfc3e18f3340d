// Host fp32 reference of the gated MLP (tests only), rounding to bf16 exactly where the device
// path does: after GEMM 1 (h13), after SiLU-multiply (act); y stays fp32 for the comparison.
#include <cmath>
#include <cstring>

#include "iser/error.h"
#include "iser/moe.h"

namespace iser::moe {
namespace {

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

// Round to nearest even, like __float2bfloat16_rn (inputs here are finite).
float round_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float rounded;
  std::memcpy(&rounded, &bits, sizeof(rounded));
  return rounded;
}

}  // namespace

std::vector<float> reference_gated_mlp(const ExpertShape& shape, std::span<const uint16_t> w13,
                                       std::span<const uint16_t> w2, std::span<const uint16_t> x,
                                       int num_rows) {
  shape.check();
  const int64_t he = shape.hidden;
  const int64_t inter = shape.intermediate;
  ISER_CHECK(static_cast<int64_t>(w13.size()) == shape.w13_elems(),
             "reference: w13 has {} elements, expected {}", w13.size(), shape.w13_elems());
  ISER_CHECK(static_cast<int64_t>(w2.size()) == shape.w2_elems(),
             "reference: w2 has {} elements, expected {}", w2.size(), shape.w2_elems());
  ISER_CHECK(static_cast<int64_t>(x.size()) == num_rows * he,
             "reference: x has {} elements, expected {}", x.size(), num_rows * he);
  std::vector<float> w13f(w13.size()), w2f(w2.size()), xf(x.size());
  for (size_t i = 0; i < w13.size(); ++i) w13f[i] = bf16_to_float(w13[i]);
  for (size_t i = 0; i < w2.size(); ++i) w2f[i] = bf16_to_float(w2[i]);
  for (size_t i = 0; i < x.size(); ++i) xf[i] = bf16_to_float(x[i]);

  std::vector<float> y(static_cast<size_t>(num_rows) * he);
  std::vector<float> h13(2 * inter), act(inter);
  for (int r = 0; r < num_rows; ++r) {
    const float* xr = xf.data() + r * he;
    for (int64_t j = 0; j < 2 * inter; ++j) {
      const float* wj = w13f.data() + j * he;
      double acc = 0.0;
      for (int64_t c = 0; c < he; ++c) acc += static_cast<double>(wj[c]) * xr[c];
      h13[j] = round_to_bf16(static_cast<float>(acc));
    }
    for (int64_t i = 0; i < inter; ++i) {
      const float g = h13[i];
      act[i] = round_to_bf16(g / (1.0f + std::exp(-g)) * h13[inter + i]);
    }
    for (int64_t o = 0; o < he; ++o) {
      const float* wo = w2f.data() + o * inter;
      double acc = 0.0;
      for (int64_t i = 0; i < inter; ++i) acc += static_cast<double>(wo[i]) * act[i];
      y[r * he + o] = static_cast<float>(acc);
    }
  }
  return y;
}

}  // namespace iser::moe
