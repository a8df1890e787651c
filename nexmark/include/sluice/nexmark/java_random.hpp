#pragma once
// java_random: java.util.Random's generator, bit for bit (a 48-bit linear congruential generator,
// the multiplier 0x5DEECE66D and the addend 0xB, as its specification fixes them). Beam's Nexmark
// generator seeds one per event with the event's number and draws every field from it, so the
// events here are Beam's only if every draw is Java's: nextInt, nextInt(bound) with its rejection
// loop, nextLong and nextDouble follow the Java SE documentation of java.util.Random.
//
//   java_random r(42);
//   r.next_int();      // -1170105035, as new Random(42).nextInt()

#include <cstdint>
#include <stdexcept>

namespace sluice::nexmark {

class java_random {
 public:
  explicit java_random(std::int64_t seed) noexcept { set_seed(seed); }

  void set_seed(std::int64_t seed) noexcept { seed_ = (static_cast<std::uint64_t>(seed) ^ multiplier) & mask; }

  std::int32_t next_int() noexcept { return next(32); }

  // Uniform in [0, bound): the same value Java's nextInt(bound) returns for the same state.
  std::int32_t next_int(std::int32_t bound) {
    if (bound <= 0) throw std::invalid_argument("java_random::next_int: bound must be positive");
    std::int32_t r = next(31);
    const std::int32_t m = bound - 1;
    if ((bound & m) == 0) return static_cast<std::int32_t>((static_cast<std::int64_t>(bound) * r) >> 31);
    // Java's loop condition `u - r + m < 0` relies on int overflow: computed in 64 bits here.
    for (std::int32_t u = r; static_cast<std::int64_t>(u) - (r = u % bound) + m > INT32_MAX; u = next(31)) {
    }
    return r;
  }

  std::int64_t next_long() noexcept {
    const std::uint64_t high = static_cast<std::uint64_t>(static_cast<std::int64_t>(next(32))) << 32;
    const std::uint64_t low = static_cast<std::uint64_t>(static_cast<std::int64_t>(next(32)));
    return static_cast<std::int64_t>(high + low);  // Java's (long) << 32 + (long), wrapping
  }

  double next_double() noexcept {
    const std::int64_t high = static_cast<std::int64_t>(next(26)) << 27;
    return static_cast<double>(high + next(27)) * 0x1.0p-53;
  }

 private:
  static constexpr std::uint64_t multiplier = 0x5DEECE66DULL;
  static constexpr std::uint64_t mask = (std::uint64_t{1} << 48) - 1;

  std::int32_t next(int bits) noexcept {
    seed_ = (seed_ * multiplier + 0xBULL) & mask;
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(seed_ >> (48 - bits)));
  }

  std::uint64_t seed_;
};

}  // namespace sluice::nexmark
