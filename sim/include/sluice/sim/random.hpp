#pragma once
// The simulator's only source of randomness: xoshiro256** seeded through splitmix64. Its output is
// fixed by the seed alone (no std:: distribution, whose results differ between libraries).

#include <cstdint>

namespace sluice::sim {

class rng {
 public:
  explicit rng(std::uint64_t seed) noexcept {
    for (auto& word : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      word = z ^ (z >> 31);
    }
  }

  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n) (n > 0), by Lemire's multiply-shift (the tiny bias is irrelevant here).
  std::uint64_t below(std::uint64_t n) noexcept {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  // Uniform in [lo, hi].
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) noexcept { return lo + below(hi - lo + 1); }
  // True with probability per_million / 1e6.
  bool chance(std::uint32_t per_million) noexcept { return per_million != 0 && below(1'000'000) < per_million; }
  bool coin() noexcept { return (next() >> 63) != 0; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace sluice::sim
