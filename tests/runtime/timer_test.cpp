#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

task<void> sleep_and_record(std::chrono::milliseconds d, std::vector<int>* order, int id) {
  const bool elapsed = co_await sleep_for(d);
  REQUIRE(elapsed);
  order->push_back(id);
}

task<std::chrono::nanoseconds> time_sleep_until(std::chrono::milliseconds ahead) {
  executor* ex = executor::current();
  const auto start = ex->now();
  const bool elapsed = co_await sleep_until(start + ahead);
  REQUIRE(elapsed);
  co_return ex->now() - start;
}

task<bool> sleep_in_the_past() { co_return co_await sleep_until(executor::current()->now() - 1s); }

}  // namespace

TEST_CASE("timers on the real ring fire in deadline order, not in start order", "[timer]") {
  std::vector<int> order;
  std::vector<task<void>> sleeps;
  // Started longest first, 4 ms apart, so kernel scheduling noise cannot reorder them.
  for (int i = 0; i < 6; ++i) sleeps.push_back(sleep_and_record(std::chrono::milliseconds(4 * (6 - i)), &order, i));
  sync_wait(when_all(std::move(sleeps)));
  REQUIRE(order == std::vector<int>{5, 4, 3, 2, 1, 0});
}

TEST_CASE("sleep_until waits at least until its deadline on the real ring", "[timer]") {
  const auto waited = sync_wait(time_sleep_until(15ms));
  REQUIRE(waited >= 15ms);
}

TEST_CASE("a deadline in the past completes at once", "[timer]") {
  REQUIRE(sync_wait(sleep_in_the_past()));
}

TEST_CASE("virtual time in the test backend advances exactly to each deadline", "[timer][test_backend]") {
  executor_options o;
  o.backend = std::make_unique<test_backend>();
  const auto waited = sync_wait(time_sleep_until(3600s), std::move(o));  // an hour, instantly
  REQUIRE(waited == 3600s);
}
