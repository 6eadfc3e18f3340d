// Random numbers for the sampling rule (docs/design.md §8). Fixed algorithms (splitmix64 for
// seeding, xoshiro256** for streams, Lemire's nearly-divisionless bounded integers) so a seed gives
// the same routes on every platform and standard library; std::*_distribution is not stable across
// implementations and is never used here.
#pragma once

#include <cstdint>

namespace iser::trace {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Hash of a sequence of 64-bit words (seed, then stream coordinates): each word is absorbed by
// one splitmix64 step, so (seed, layer, iteration, P) streams are independent of one another.
inline uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0,
                         uint64_t d = 0) {
  uint64_t state = seed;
  uint64_t h = splitmix64(state);
  for (const uint64_t w : {a, b, c, d}) {
    state = h ^ w;
    h = splitmix64(state);
  }
  return h;
}

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    uint64_t state = seed;
    for (uint64_t& w : s_) w = splitmix64(state);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform integer in [0, bound), bound >= 1 (Lemire 2019, exact: rejects the biased zone).
  uint64_t below(uint64_t bound) {
    __uint128_t m = static_cast<__uint128_t>(next()) * bound;
    auto low = static_cast<uint64_t>(m);
    if (low < bound) [[unlikely]] {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<__uint128_t>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform double in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace iser::trace
