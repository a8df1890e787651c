#pragma once
// latency_histogram: a fixed-size log-linear histogram of durations in nanoseconds (16 sub-buckets
// per power of two, so a percentile is within 1/16 = 6.25 % of the true value). Recording is one
// array increment; it allocates nothing after construction. Not thread-safe: one per client,
// merged at the end.

#include <array>
#include <bit>
#include <cstdint>

namespace sluice::apps {

class latency_histogram {
 public:
  void record(std::uint64_t ns) noexcept {
    ++counts_[index_of(ns)];
    ++total_;
  }
  void merge(const latency_histogram& other) noexcept {
    for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
  }
  std::uint64_t count() const noexcept { return total_; }

  // The value below which a fraction `q` (0..1) of the samples lie (a bucket's upper bound).
  std::uint64_t percentile(double q) const noexcept {
    if (total_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total_));
    if (rank >= total_) rank = total_ - 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen > rank) return upper_bound_of(i);
    }
    return upper_bound_of(counts_.size() - 1);
  }

 private:
  static constexpr unsigned sub_bits = 4;
  static constexpr std::uint64_t sub = 1u << sub_bits;

  static std::size_t index_of(std::uint64_t ns) noexcept {
    if (ns < sub) return static_cast<std::size_t>(ns);
    const unsigned e = static_cast<unsigned>(std::bit_width(ns)) - 1;  // >= sub_bits
    const std::uint64_t mantissa = (ns >> (e - sub_bits)) & (sub - 1);
    return static_cast<std::size_t>((e - sub_bits + 1) * sub + mantissa);
  }
  static std::uint64_t upper_bound_of(std::size_t index) noexcept {
    if (index < sub) return index;
    const unsigned e = static_cast<unsigned>(index / sub) + sub_bits - 1;
    const std::uint64_t mantissa = index % sub;
    return ((sub + mantissa + 1) << (e - sub_bits)) - 1;
  }

  std::array<std::uint64_t, (64 - sub_bits + 1) * sub> counts_{};
  std::uint64_t total_ = 0;
};

}  // namespace sluice::apps
