// Tasks that move between executors while their roots, groups or executors wind down
// (regressions from a review: each of these once crashed, hung or raced).

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/runtime/when_any.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <stop_token>
#include <thread>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

task<int> hop_away(executor* there) {
  co_await switch_to(*there);
  co_return executor::current()->id();
}

task<void> end_elsewhere(executor* there, std::atomic<int>* ended_on) {
  co_await switch_to(*there);
  ended_on->store(executor::current()->id());
}

task<void> spawn_end_elsewhere(executor* there, std::atomic<int>* ended_on) {
  spawn(end_elsewhere(there, ended_on));
  co_return;
}

task<void> late_switch(engine* eng, std::atomic<bool>* arrived) {
  co_await sleep_for(1h);  // ended by the engine's stop
  std::this_thread::sleep_for(50ms);  // executor 0 leaves run() meanwhile
  co_await switch_to(eng->at(0));
  arrived->store(true);
}

task<std::tuple<int, int>> children_end_elsewhere(executor* there) {
  co_return co_await when_all(hop_away(there), hop_away(there));
}

task<bool> sleep_long() { co_return co_await sleep_for(10s); }

task<bool> scope_stopped_during_join(std::stop_source* parent, bool* child_slept_fully) {
  scope s(parent->get_token());
  struct body {
    static task<void> run(bool* out) { *out = co_await sleep_long(); }
  };
  s.spawn(body::run(child_slept_fully));
  co_await s.join();
  co_return true;
}

task<void> stop_later(std::stop_source* source) {
  co_await sleep_for(5ms);
  source->request_stop();
}

task<bool> wait_for(event* e) { co_return co_await e->wait(); }

task<void> set_then_destroy(std::unique_ptr<event>* e) {
  co_await yield();
  (*e)->set();
  e->reset();  // destroyed before the woken waiter runs
}

}  // namespace

TEST_CASE("sync_wait returns when its task ends on another executor", "[migration]") {
  engine eng({.executors = 1, .handle_signals = false});
  REQUIRE(sync_wait(hop_away(&eng.at(0))) == 0);
}

TEST_CASE("a detached task that ends on another executor lets its home executor shut down", "[migration]") {
  engine eng({.executors = 1, .handle_signals = false});
  std::atomic<int> ended_on{-1};
  {
    executor home({.id = 7});
    home.block_on(spawn_end_elsewhere(&eng.at(0), &ended_on));
  }  // ~executor drains: it must see the task finish although it ended on executor 0
  REQUIRE(ended_on == 0);
}

TEST_CASE("when_all children that end on another executor are joined at home", "[migration]") {
  engine eng({.executors = 1, .handle_signals = false});
  auto [a, b] = sync_wait(children_end_elsewhere(&eng.at(0)));
  REQUIRE(a == 0);
  REQUIRE(b == 0);
}

TEST_CASE("a task that switches to an executor during engine shutdown does not crash it", "[migration]") {
  std::atomic<bool> arrived{false};
  {
    engine eng({.executors = 2, .handle_signals = false});
    spawn_on(eng.at(1), late_switch(&eng, &arrived));
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(arrived);  // it was served by executor 0's shutdown phase
}

TEST_CASE("a scope linked to a parent token still stops its children when stopped during join", "[migration]") {
  std::stop_source parent;
  bool child_slept_fully = true;
  auto both = when_all(scope_stopped_during_join(&parent, &child_slept_fully), stop_later(&parent));
  sync_wait(std::move(both));
  REQUIRE_FALSE(child_slept_fully);
}

TEST_CASE("an event destroyed by its setter before the waiter runs is not read again", "[migration]") {
  auto e = std::make_unique<event>();
  auto [woken, unused] = sync_wait(when_all(wait_for(e.get()), set_then_destroy(&e)));
  (void)unused;
  REQUIRE(woken);
  REQUIRE(e == nullptr);
}
