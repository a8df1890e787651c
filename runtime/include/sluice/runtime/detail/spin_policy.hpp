#pragma once
// spin_policy: how long an executor spins on its inbox before it sleeps, learnt from whether recent
// spins paid off.
//
// A spin pays off when a reply arrives while we spin (a ping-pong between two awake executors):
// it saves an eventfd wake-up of microseconds. It costs the whole spin when nothing arrives, and
// on an oversubscribed machine (more runnable threads than cores) it is worse than useless: the
// peer that would reply may be waiting for the very core we spin on. So the budget doubles (up
// to the configured maximum) after a spin that paid off and drops to a quarter after one that did
// not; below `probe` it is zero, and then only every `probe_interval`-th sleep spins, for `probe`,
// to find out whether spinning pays again. Owner-thread state, no clock: the caller times the spin.

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace sluice::runtime::detail {

class spin_policy {
 public:
  static constexpr std::chrono::nanoseconds probe{2'000};
  static constexpr std::uint32_t probe_interval = 64;

  explicit spin_policy(std::chrono::nanoseconds max) noexcept
      : max_(std::max(max, std::chrono::nanoseconds{0})), budget_(max_) {}

  // The spin to try before this sleep; zero: sleep at once.
  std::chrono::nanoseconds next() noexcept {
    if (max_.count() == 0) return max_;
    if (budget_.count() > 0) return budget_;
    if (++skipped_ < probe_interval) return budget_;
    skipped_ = 0;
    return std::min(probe, max_);
  }

  // The outcome of the spin next() asked for: did a message arrive before it ran out?
  void record(bool paid_off) noexcept {
    if (paid_off) {
      budget_ = std::min(max_, std::max(budget_ * 2, probe));
    } else {
      budget_ /= 4;
      if (budget_ < probe) budget_ = std::chrono::nanoseconds{0};
    }
  }

  std::chrono::nanoseconds budget() const noexcept { return budget_; }

 private:
  std::chrono::nanoseconds max_;
  std::chrono::nanoseconds budget_;
  std::uint32_t skipped_ = 0;
};

}  // namespace sluice::runtime::detail
