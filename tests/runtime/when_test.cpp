#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/runtime/when_any.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;
using sluice::test::virtual_time;

namespace {

task<int> value_after(std::chrono::milliseconds delay, int value) {
  co_await sleep_for(delay);
  co_return value;
}

task<void> record_after(std::chrono::milliseconds delay, std::vector<int>* order, int id) {
  co_await sleep_for(delay);
  order->push_back(id);
}

task<void> fail_after(std::chrono::milliseconds delay) {
  co_await sleep_for(delay);
  throw std::runtime_error("child failed");
}

// Sleeps long; records whether it was stopped rather than finishing.
task<int> long_sleeper(bool* stopped) {
  bool elapsed = co_await sleep_for(1h);
  *stopped = !elapsed;
  co_return -1;
}

}  // namespace

TEST_CASE("when_all returns every result in argument order", "[when_all]") {
  auto [a, b, c] = sync_wait(when_all(value_after(30ms, 1), value_after(10ms, 2), value_after(20ms, 3)), virtual_time());
  REQUIRE(a == 1);
  REQUIRE(b == 2);
  REQUIRE(c == 3);
}

TEST_CASE("when_all over a vector runs the tasks concurrently", "[when_all]") {
  std::vector<int> order;
  std::vector<task<void>> tasks;
  for (int i = 0; i < 5; ++i) tasks.push_back(record_after(std::chrono::milliseconds(50 - i * 10), &order, i));
  sync_wait(when_all(std::move(tasks)), virtual_time());
  REQUIRE(order == std::vector<int>{4, 3, 2, 1, 0});
}

TEST_CASE("when_all stops the siblings of a failing task and rethrows its exception", "[when_all]") {
  bool stopped = false;
  REQUIRE_THROWS_WITH(sync_wait(when_all(fail_after(1ms), long_sleeper(&stopped)), virtual_time()), "child failed");
  REQUIRE(stopped);
}

TEST_CASE("when_any returns the first to finish and stops and joins the losers", "[when_any]") {
  bool stopped = false;
  const auto before = live_frames();
  auto r = sync_wait(when_any(value_after(5ms, 7), long_sleeper(&stopped)), virtual_time());
  REQUIRE(r.index == 0);
  REQUIRE(std::get<0>(r.value) == 7);
  REQUIRE(stopped);  // the loser saw its stop token and was joined before we got here
  REQUIRE(live_frames() == before);
}

TEST_CASE("with_timeout yields nullopt and stops the task when it is too slow", "[timer]") {
  bool stopped = false;
  auto r = sync_wait(with_timeout(long_sleeper(&stopped), 10ms), virtual_time());
  REQUIRE_FALSE(r.has_value());
  REQUIRE(stopped);
  auto fast = sync_wait(with_timeout(value_after(1ms, 5), 10ms), virtual_time());
  REQUIRE(fast == std::optional<int>(5));
}

namespace {
task<void> discard(task<int> t) { co_await std::move(t); }
task<int> scoped(std::vector<int>* order) {
  scope s;
  for (int i = 0; i < 3; ++i) s.spawn(record_after(std::chrono::milliseconds(30 - 10 * i), order, i));
  co_await s.join();
  co_return static_cast<int>(order->size());
}
task<void> scope_with_failure(bool* stopped) {
  scope s;
  s.spawn(discard(long_sleeper(stopped)));
  s.spawn(fail_after(2ms));
  co_await s.join();
}
}  // namespace

TEST_CASE("a scope joins all of its children", "[scope]") {
  std::vector<int> order;
  REQUIRE(sync_wait(scoped(&order), virtual_time()) == 3);
  REQUIRE(order == std::vector<int>{2, 1, 0});
}

TEST_CASE("a failing child stops its scope's other children and join rethrows", "[scope]") {
  bool stopped = false;
  REQUIRE_THROWS_WITH(sync_wait(scope_with_failure(&stopped), virtual_time()), "child failed");
  REQUIRE(stopped);
}
