#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <coroutine>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

executor_options virtual_time() {
  executor_options o;
  o.backend = std::make_unique<test_backend>();
  return o;
}

task<int> answer() { co_return 42; }

task<int> fails_with(std::string message) {
  throw std::runtime_error(message);
  co_return 0;
}

// Every await of the fiber lands here; the ticker runs between them on the same executor.
task<void> ticker(int ticks, std::chrono::milliseconds period, int* count) {
  for (int i = 0; i < ticks; ++i) {
    co_await sleep_for(period);
    ++*count;
  }
}

task<void> fiber_beside_ticker(std::vector<int>* seen, int* ticks) {
  auto fiber = run_fiber([seen, ticks] {
    for (int i = 0; i < 4; ++i) {
      if (!await(sleep_for(10ms))) throw std::runtime_error("sleep was cancelled");
      seen->push_back(*ticks);
    }
  });
  co_await when_all(std::move(fiber), ticker(7, 3ms, ticks));
}

// Nested: a task that itself runs a fiber, awaited from another fiber.
task<int> inner_fiber_task(int x) {
  auto inner = run_fiber([x] { return await(answer()) + x; });
  co_return co_await std::move(inner);
}

task<void> many_fibers(int count, int* finished) {
  std::vector<task<void>> fibers;
  fibers.reserve(static_cast<std::size_t>(count));
  fiber_options small;
  small.stack_bytes = 32 * 1024;
  for (int i = 0; i < count; ++i) {
    fibers.push_back(run_fiber(
        [i, finished] {
          await(sleep_for(std::chrono::milliseconds(1 + i % 7)));
          await(yield());
          ++*finished;
        },
        small));
  }
  co_await when_all(std::move(fibers));
}

task<void> await_outside_a_fiber() {
  await(answer());
  co_return;
}

struct home_report {
  bool same_executor = false;
  bool same_thread = false;
  bool request_ran_elsewhere = false;
};

task<void> note_executor(executor* away, bool* ran_there) {
  *ran_there = executor::current() == away;
  co_return;
}

// An awaited task that moves to another executor and stays there.
task<void> hop_to(executor* away, bool* ran_there) {
  co_await switch_to(*away);
  co_await note_executor(away, ran_there);
}

// Spawned on an executor, stops it from its own thread.
task<void> stop_this_executor() {
  executor::current()->request_stop();
  co_return;
}

struct stop_report {
  bool sleep_completed = true;
  bool stop_seen = false;
  std::chrono::nanoseconds slept{};
};

task<std::optional<int>> fiber_under_timeout(stop_report* report) {
  auto fiber = run_fiber([report] {
    const auto start = executor::current()->now();
    report->sleep_completed = await(sleep_for(1h));
    report->slept = executor::current()->now() - start;
    report->stop_seen = await(current_stop_token()).stop_requested();
    return 1;
  });
  co_return co_await with_timeout(std::move(fiber), 10ms);
}

// Suspends whoever awaits it and never resumes it: the only way out is destruction.
struct park {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  void await_resume() const noexcept {}
};

struct set_on_destroy {
  bool* flag;
  ~set_on_destroy() { *flag = true; }
};

struct unwind_report {
  bool parked = false;
  bool resumed_after_park = false;
  bool destructor_ran = false;
  bool catch_all_saw_it = false;
};

task<void> destroy_a_parked_fiber(unwind_report* report) {
  auto fiber = run_fiber([report] {
    set_on_destroy guard{&report->destructor_ran};
    report->parked = true;
    try {
      await(park{});
    } catch (...) {
      report->catch_all_saw_it = true;
      throw;  // a fiber must let fiber_unwind pass
    }
    report->resumed_after_park = true;
  });
  // Start the fiber without awaiting it, so that its task can be destroyed while it is parked. A
  // resume from inside this coroutine, which only a test may do: the nested-resume check is off.
  detail::dispatching = false;
  detail::resume(fiber.handle());
  detail::dispatching = true;
  co_return;  // `fiber` is destroyed here, suspended
}

}  // namespace

TEST_CASE("a fiber returns its function's value to the awaiter", "[fiber]") {
  REQUIRE(sync_wait(run_fiber([] { return 6 * 7; })) == 42);
  REQUIRE(sync_wait(run_fiber([] {
            auto t = answer();
            return await(t) + await(answer());  // an lvalue task and an rvalue one
          })) == 84);
  REQUIRE(sync_wait(run_fiber([] { return std::make_unique<int>(7); })) != nullptr);
  bool in_fn = false;
  sync_wait(run_fiber([&in_fn] { in_fn = in_fiber(); }));
  REQUIRE(in_fn);
  REQUIRE_FALSE(in_fiber());
}

TEST_CASE("a fiber blocked in sleeps suspends only itself: other coroutines keep running", "[fiber]") {
  std::vector<int> seen;
  int ticks = 0;
  sync_wait(fiber_beside_ticker(&seen, &ticks), virtual_time());
  // Ticks at 3,6,...,21 ms; the fiber wakes at 10, 20, 30 and 40 ms.
  REQUIRE(seen == std::vector<int>{3, 6, 7, 7});
  REQUIRE(ticks == 7);
}

TEST_CASE("the same fiber sleeps on the io_uring backend too", "[fiber]") {
  const auto start = std::chrono::steady_clock::now();
  const int slept = sync_wait(run_fiber([] {
    int n = 0;
    for (int i = 0; i < 3; ++i) n += await(sleep_for(2ms)) ? 1 : 0;
    return n;
  }));
  REQUIRE(slept == 3);
  REQUIRE(std::chrono::steady_clock::now() - start >= 6ms);
}

TEST_CASE("an exception escaping the fiber's function propagates to the awaiter", "[fiber]") {
  REQUIRE_THROWS_WITH(sync_wait(run_fiber([]() -> int { throw std::runtime_error("from the fiber"); })),
                      "from the fiber");
  REQUIRE_THROWS_WITH(sync_wait(run_fiber([] { await(fails_with("awaited, not caught")); })),
                      "awaited, not caught");
}

TEST_CASE("an exception from an awaited task is catchable inside the fiber, which then continues", "[fiber]") {
  const std::string result = sync_wait(run_fiber([] {
    std::string log;
    try {
      await(fails_with("boom"));
      log += "not thrown;";
    } catch (const std::runtime_error& e) {
      log += std::string("caught ") + e.what() + ";";
    }
    log += std::to_string(await(answer()));
    return log;
  }));
  REQUIRE(result == "caught boom;42");
}

TEST_CASE("a fiber can await a task that itself runs another fiber", "[fiber]") {
  const int result = sync_wait(run_fiber([] {
    const int a = await(inner_fiber_task(1));
    const int b = await(inner_fiber_task(2));
    return a * 100 + b;
  }));
  REQUIRE(result == 43 * 100 + 44);
}

TEST_CASE("1,000 concurrent fibers with small stacks all finish", "[fiber]") {
  const auto before = live_frames();
  int finished = 0;
  sync_wait(many_fibers(1000, &finished), virtual_time());
  REQUIRE(finished == 1000);
  REQUIRE(live_frames() == before);
}

TEST_CASE("a fiber resumes on its own executor even when the awaited task moved away", "[fiber]") {
  std::promise<executor*> started;
  std::thread other([&started] {
    executor ex;
    started.set_value(&ex);
    ex.run();
    detail::fold_thread_frames();
  });
  executor* away = started.get_future().get();
  home_report report;
  sync_wait(run_fiber([away, &report] {
    executor* home = executor::current();
    const auto thread = std::this_thread::get_id();
    await(hop_to(away, &report.request_ran_elsewhere));
    report.same_executor = executor::current() == home;
    report.same_thread = std::this_thread::get_id() == thread;
  }));
  spawn_on(*away, stop_this_executor());
  other.join();
  REQUIRE(report.request_ran_elsewhere);
  REQUIRE(report.same_executor);
  REQUIRE(report.same_thread);
}

TEST_CASE("await outside a fiber fails with a clear error", "[fiber]") {
  REQUIRE_THROWS_AS(await(answer()), std::logic_error);
  REQUIRE_THROWS_WITH(sync_wait(await_outside_a_fiber()), Catch::Contains("called outside a fiber"));
}

TEST_CASE("a stopped fiber task stops the sleep its fiber awaits", "[fiber]") {
  stop_report report;
  REQUIRE(sync_wait(fiber_under_timeout(&report), virtual_time()) == std::nullopt);
  REQUIRE_FALSE(report.sleep_completed);
  REQUIRE(report.stop_seen);
  REQUIRE(report.slept == 10ms);  // virtual time: the timeout, not the hour
}

TEST_CASE("a run_fiber task destroyed before it is awaited never runs", "[fiber]") {
  const auto before = live_frames();
  bool ran = false;
  {
    auto t = run_fiber([&ran] { ran = true; });
    REQUIRE(t.valid());  // (clang at -O2 may elide this frame, so its count is not checked here)
  }
  REQUIRE_FALSE(ran);
  REQUIRE(live_frames() == before);
}

TEST_CASE("destroying a run_fiber task while its fiber is suspended unwinds the fiber", "[fiber]") {
  const auto before = live_frames();
  unwind_report report;
  sync_wait(destroy_a_parked_fiber(&report));
  REQUIRE(report.parked);
  REQUIRE(report.catch_all_saw_it);
  REQUIRE(report.destructor_ran);
  REQUIRE_FALSE(report.resumed_after_park);
  REQUIRE_FALSE(in_fiber());
  REQUIRE(live_frames() == before);
}

TEST_CASE("no frame is left behind after fibers that await, fail and nest", "[fiber]") {
  const auto before = live_frames();
  REQUIRE(sync_wait(run_fiber([] { return await(inner_fiber_task(0)); })) == 42);
  REQUIRE_THROWS(sync_wait(run_fiber([] { await(fails_with("x")); })));
  REQUIRE(live_frames() == before);
}

TEST_CASE("the fiber switch benchmark measures a positive round trip", "[fiber]") {
  const double ns = bench_support::measure_fiber_switch_ns(1000);
  REQUIRE(ns > 0.0);
  REQUIRE(ns < 1e6);
}
