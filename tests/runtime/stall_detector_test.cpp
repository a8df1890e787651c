// The stall detector (runtime/src/stall_detector.hpp, engine_options::stalls): an executor whose
// turn blocks or computes past the threshold is reported once per stall, naming the executor, the
// code it runs and the system call it is blocked in; an executor that merely waits for work, however
// long, is not.

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/timer.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

// Every log line while it lives.
struct log_lines {
  std::mutex mutex;
  std::vector<std::string> lines;
  log::scoped_sink sink{[this](const log::event& e) {
    std::lock_guard lock(mutex);
    lines.emplace_back(e.text);
  }};
  std::string matching(std::string_view what) {
    log::flush();
    std::lock_guard lock(mutex);
    for (const std::string& l : lines) {
      if (l.find(what) != std::string::npos) return l;
    }
    return {};
  }
};

engine_options watched(std::chrono::milliseconds threshold) {
  engine_options o;
  o.executors = 2;
  o.handle_signals = false;
  o.stalls = stall_options{.threshold = threshold, .fatal_after = std::chrono::milliseconds(0)};
  return o;
}

}  // namespace

namespace stall_test {

// A blocking system call on the executor: what a host callback did with a full sd_notify socket.
task<void> block_in_a_system_call(std::chrono::milliseconds how_long) {
  ::usleep(static_cast<useconds_t>(std::chrono::microseconds(how_long).count()));
  co_return;
}

task<void> spin_for(std::chrono::milliseconds how_long) {
  const auto until = std::chrono::steady_clock::now() + how_long;
  volatile std::uint64_t n = 0;
  while (std::chrono::steady_clock::now() < until) n = n + 1;
  co_return;
}

task<void> wait_a_while(std::chrono::milliseconds how_long) { co_await sleep_for(how_long); }

}  // namespace stall_test

using namespace stall_test;

TEST_CASE("an executor blocked in a system call past the threshold is reported once with the call and the code") {
  log_lines logs;
  engine eng(watched(50ms));
  eng.block_on(run_on(&eng.at(1), block_in_a_system_call(400ms)));
  CHECK(eng.stalls(1) == 1);
  CHECK(eng.stalls(0) == 0);
  const std::string report = logs.matching("executor 1 stalled");
  INFO(report);
  REQUIRE_FALSE(report.empty());
  CHECK(report.find("blocked in clock_nanosleep") != std::string::npos);
  // The coroutine: by name when its symbol is exported, else where to look it up (a coroutine's
  // resume function is a local symbol).
  CHECK((report.find("block_in_a_system_call") != std::string::npos ||
         report.find("addr2line -Cfe") != std::string::npos));
}

TEST_CASE("a coroutine that computes past the threshold without yielding is a stall") {
  log_lines logs;
  engine eng(watched(50ms));
  eng.block_on(run_on(&eng.at(0), spin_for(300ms)));
  CHECK(eng.stalls(0) == 1);
  CHECK_FALSE(logs.matching("executor 0 stalled").empty());
}

TEST_CASE("an executor that waits for work or a timer however long is not a stall") {
  log_lines logs;
  engine eng(watched(20ms));
  eng.block_on(run_on(&eng.at(1), wait_a_while(300ms)));
  std::this_thread::sleep_for(200ms);  // both executors idle meanwhile
  CHECK(eng.stalls(0) == 0);
  CHECK(eng.stalls(1) == 0);
  CHECK(logs.matching("stalled").empty());
}

TEST_CASE("a threshold of zero switches the detector off") {
  engine eng(watched(0ms));
  eng.block_on(run_on(&eng.at(0), block_in_a_system_call(100ms)));
  CHECK(eng.stalls(0) == 0);
}

TEST_CASE("the environment sets the threshold and when a stall is fatal") {
  const char* was = std::getenv("SLUICE_STALL_FATAL_MS");
  const std::string fatal_before = was != nullptr ? was : "";
  ::setenv("SLUICE_STALL_MS", "250", 1);
  ::setenv("SLUICE_STALL_FATAL_MS", "0", 1);
  stall_options o = stall_options::from_environment();
  CHECK(o.threshold == 250ms);
  CHECK(o.fatal_after == 0ms);
  ::setenv("SLUICE_STALL_FATAL_MS", "700", 1);
  o = stall_options::from_environment();
  CHECK(o.fatal_after == 700ms);
  ::unsetenv("SLUICE_STALL_MS");
  o = stall_options::from_environment();
  CHECK(o.threshold == 100ms);
  ::setenv("SLUICE_STALL_FATAL_MS", fatal_before.c_str(), 1);
}
