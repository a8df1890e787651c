// The adaptive spin's decisions (detail::spin_policy), without clocks: what the executor would spin.

#include <sluice/runtime/detail/spin_policy.hpp>

#include <catch2/catch.hpp>

using sluice::runtime::detail::spin_policy;
using namespace std::chrono_literals;

TEST_CASE("an executor spins its full budget while spins pay off") {
  spin_policy p(50us);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(p.next() == 50us);
    p.record(true);
  }
}

TEST_CASE("spins that find nothing shrink the budget to none, then only probes spin") {
  spin_policy p(50us);
  REQUIRE(p.next() == 50us);
  p.record(false);
  REQUIRE(p.next() == 12500ns);
  p.record(false);
  p.record(false);
  REQUIRE(p.next() == 0ns);  // 781 ns is below the probe: no spin at all
  int probes = 0;
  for (std::uint32_t i = 0; i < 10 * spin_policy::probe_interval; ++i) {
    const auto spin = p.next();
    if (spin.count() > 0) {
      REQUIRE(spin == spin_policy::probe);
      ++probes;
      p.record(false);
    }
  }
  REQUIRE(probes == 10);
}

TEST_CASE("a probe that pays off grows the budget back, never past the maximum") {
  spin_policy p(50us);
  for (int i = 0; i < 3; ++i) p.record(false);
  REQUIRE(p.budget() == 0ns);
  p.record(true);
  REQUIRE(p.budget() == spin_policy::probe);
  for (int i = 0; i < 10; ++i) p.record(true);
  REQUIRE(p.budget() == 50us);
}

TEST_CASE("a zero maximum never spins") {
  spin_policy p(0us);
  for (std::uint32_t i = 0; i < 2 * spin_policy::probe_interval; ++i) REQUIRE(p.next() == 0ns);
}
