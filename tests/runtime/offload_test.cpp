// offload (offload.hpp): a blocking call runs on the pool while its executor runs the rest, and the
// awaiter resumes on its own executor; inline where no pool may be used.

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/offload.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/death.hpp>
#include <support/recording_system.hpp>

#include <catch2/catch.hpp>

#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

struct where {
  std::thread::id caller;
  std::thread::id ran_on;
  std::thread::id resumed_on;
  int value = 0;
};

task<void> release_after_yield(std::promise<void>* go) {
  co_await yield();
  go->set_value();
}

// The call waits for a coroutine of the same executor: it can only return if the executor keeps
// running while the call blocks.
task<where> blocked_until_the_executor_runs_on() {
  where w;
  w.caller = std::this_thread::get_id();
  std::promise<void> go;
  std::future<void> released = go.get_future();
  auto blocking = [&w, &released] {
    w.ran_on = std::this_thread::get_id();
    return released.wait_for(20s) == std::future_status::ready ? 42 : -1;
  };
  scope others;
  others.spawn(release_after_yield(&go));
  w.value = co_await offload(blocking);
  w.resumed_on = std::this_thread::get_id();
  co_await others.join();
  co_return w;
}

task<std::string> failing_call() {
  auto fails = [] { throw std::runtime_error("readdir failed"); };
  try {
    co_await offload(fails);
  } catch (const std::exception& e) {
    co_return e.what();
  }
  co_return "no exception";
}

task<where> inline_call() {
  where w;
  w.caller = std::this_thread::get_id();
  auto call = [&w] {
    w.ran_on = std::this_thread::get_id();
    return 7;
  };
  w.value = co_await offload(call);
  w.resumed_on = std::this_thread::get_id();
  co_return w;
}

// `n` calls at once from executor `ex`, each checking that it resumed there.
task<int> many_on(executor* ex, int n) {
  co_await switch_to(*ex);
  int resumed_home = 0;
  scope calls;
  struct one {
    static task<void> run(executor* home, int* resumed_home) {
      auto call = [] {
        std::this_thread::sleep_for(100us);
        return std::this_thread::get_id();
      };
      const std::thread::id ran_on = co_await offload(call);
      if (executor::current() == home && ran_on != std::this_thread::get_id()) ++*resumed_home;
    }
  };
  for (int i = 0; i < n; ++i) calls.spawn(one::run(ex, &resumed_home));
  co_await calls.join();
  co_return resumed_home;
}

task<int> many_on_all(engine* e, int n) {
  std::vector<task<int>> parts;
  for (std::size_t i = 0; i < e->size(); ++i) parts.push_back(many_on(&e->at(i), n));
  auto counts = co_await when_all(std::move(parts));
  int total = 0;
  for (int c : counts) total += c;
  co_return total;
}

}  // namespace

TEST_CASE("an offloaded call blocks a pool thread, not its executor, and the awaiter resumes on the executor",
          "[offload]") {
  const where w = sync_wait(blocked_until_the_executor_runs_on());
  CHECK(w.value == 42);
  CHECK(w.ran_on != w.caller);
  CHECK(w.resumed_on == w.caller);
}

TEST_CASE("an exception thrown by an offloaded call is rethrown where it was awaited", "[offload]") {
  CHECK(sync_wait(failing_call()) == "readdir failed");
}

TEST_CASE("under a stand-in system an offloaded call runs inline, so it sees that system", "[offload]") {
  sluice::test::recording_system os;
  system_scope scope(os);
  const where w = sync_wait(inline_call());
  CHECK(w.value == 7);
  CHECK(w.ran_on == w.caller);
  CHECK(w.resumed_on == w.caller);
}

TEST_CASE("an engine's pool starts at most its threads as calls come, and stop joins them", "[offload][engine]") {
  blocking_pool* pool = nullptr;
  engine eng({.executors = 3, .handle_signals = false, .blocking_threads = 2});
  pool = &eng.at(0).blocking();
  CHECK(&eng.at(1).blocking() == pool);
  CHECK(&eng.at(0).blocking() != &default_blocking_pool());
  CHECK(pool->threads() == 0);  // none until a call comes
  CHECK(eng.block_on(many_on_all(&eng, 40)) == 120);
  CHECK(pool->threads() >= 1);
  CHECK(pool->threads() <= 2);
  eng.stop();
  CHECK(pool->threads() == 0);
}

namespace {

task<std::string> offload_without_threads() {
  auto nothing = [] {};
  try {
    co_await offload(nothing);
  } catch (const std::exception& e) {
    co_return std::string(e.what());
  }
  co_return std::string("ran");
}

}  // namespace

TEST_CASE("a pool thread that cannot start fails the offload naming the thread and its stack", "[offload]") {
  // In a child: every new thread there asks for a stack larger than any address space.
  const sluice::test::child_end end = sluice::test::run_in_child([] {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, std::size_t{1} << 47);
    pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
    const std::string said = sync_wait(offload_without_threads());
    std::fprintf(stderr, "%s\n", said.c_str());
  });
  INFO(end.stderr_text);
  CHECK(end.exit_code == 0);
  CHECK(end.stderr_text.find("start a blocking-work thread: Resource temporarily unavailable (its stack needs "
                             "134217728.0 MiB") != std::string::npos);
  CHECK(end.stderr_text.find("ulimit") != std::string::npos);  // the hint
}
