#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

executor_options with_test_backend(test_backend** out) {
  executor_options o;
  auto b = std::make_unique<test_backend>();
  *out = b.get();
  o.backend = std::move(b);
  return o;
}

task<void> bump(int* counter) {
  co_await yield();
  ++*counter;
}

task<int> hundred_thousand_tasks() {
  int counter = 0;
  scope s;
  for (int i = 0; i < 100'000; ++i) s.spawn(bump(&counter));
  co_await s.join();
  co_return counter;
}

task<void> record_turns(std::vector<int>* order, int id, int turns) {
  for (int i = 0; i < turns; ++i) {
    order->push_back(id);
    co_await yield();
  }
}

task<int> nops(int count) {
  int ok = 0;
  for (int i = 0; i < count; ++i) {
    io_op op;
    op.code = op_code::nop;
    const int rc = co_await submit_op(op);
    if (rc == 0) ++ok;
  }
  co_return ok;
}

task<void> fail_detached() {
  co_await yield();
  throw std::runtime_error("detached failure");
}

task<int> spawn_then_continue(int* counter) {
  spawn(bump(counter));
  spawn(bump(counter));
  spawn(fail_detached());
  co_await sleep_for(1ms);
  co_return *counter;
}

}  // namespace

TEST_CASE("100,000 concurrent tasks all run to completion", "[executor]") {
  const auto before = live_frames();
  REQUIRE(sync_wait(hundred_thousand_tasks()) == 100'000);
  REQUIRE(live_frames() == before);
}

TEST_CASE("yield goes to the back of the run queue, so tasks interleave fairly", "[executor]") {
  std::vector<int> order;
  sync_wait(when_all(record_turns(&order, 1, 3), record_turns(&order, 2, 3)));
  REQUIRE(order == std::vector<int>{1, 2, 1, 2, 1, 2});
}

TEST_CASE("io_uring NOPs complete with 0, far more of them than the rings hold", "[executor]") {
  std::vector<task<int>> tasks;
  for (int i = 0; i < 3000; ++i) tasks.push_back(nops(10));  // 3000 in flight > CQ size: backlog
  auto results = sync_wait(when_all(std::move(tasks)));
  int total = 0;
  for (int r : results) total += r;
  REQUIRE(total == 30'000);
}

TEST_CASE("a small ring (SQ 4, CQ 8) still completes every operation", "[executor]") {
  executor_options o;
  o.uring.sq_entries = 4;
  o.uring.cq_entries = 8;
  std::vector<task<int>> tasks;
  for (int i = 0; i < 200; ++i) tasks.push_back(nops(5));
  auto results = sync_wait(when_all(std::move(tasks)), std::move(o));
  int total = 0;
  for (int r : results) total += r;
  REQUIRE(total == 1000);
}

TEST_CASE("detached tasks run, and a failing one is logged without stopping the others", "[executor]") {
  int counter = 0;
  REQUIRE(sync_wait(spawn_then_continue(&counter)) == 2);
}

TEST_CASE("the test backend delivers completions in the order the test chooses", "[executor][test_backend]") {
  test_backend* backend = nullptr;
  executor ex(with_test_backend(&backend));
  backend->set_auto(false);
  std::vector<int> order;
  std::vector<io_op*> seen;
  backend->on_idle = [&](test_backend& b) {
    // Complete the newest first: the reverse of submission order.
    if (!b.pending().empty()) {
      for (auto* op : b.pending()) {
        if (op->code == op_code::nop) {
          seen.push_back(op);
        }
      }
      io_op* newest = nullptr;
      for (auto* op : b.pending()) {
        if (op->code == op_code::nop) newest = op;
      }
      if (newest) b.complete(*newest, 7);
    }
  };
  struct local {
    static task<void> one(std::vector<int>* order, int id) {
      io_op op;
      op.code = op_code::nop;
      int r = co_await submit_op(op);
      REQUIRE(r == 7);
      order->push_back(id);
    }
  };
  ex.block_on(when_all(local::one(&order, 1), local::one(&order, 2), local::one(&order, 3)));
  REQUIRE(order == std::vector<int>{3, 2, 1});
  backend->on_idle = nullptr;
}

namespace {
sluice::runtime::task<void> hog(bool* stop, int* turns) {
  while (!*stop) {
    ++*turns;
    co_await sluice::runtime::yield_to_io();
  }
}
sluice::runtime::task<void> timer_then_stop(bool* stop) {
  const bool slept = co_await sluice::runtime::sleep_for(std::chrono::milliseconds(2));
  CHECK(slept);
  *stop = true;
}
sluice::runtime::task<void> hog_body(int* turns) {
  bool stop = false;
  co_await sluice::runtime::when_all(hog(&stop, turns), timer_then_stop(&stop));
}
}  // namespace

TEST_CASE("a coroutine that only yields to io lets a timer on its executor fire", "[executor]") {
  int turns = 0;
  sluice::runtime::sync_wait(hog_body(&turns));
  CHECK(turns > 0);
}
