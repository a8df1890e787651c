// Every seed ends: the world's step budgets (a process that goes on step after step), the parent's
// watchdog (a process that spins inside one step), and the alarm a driver sends a stop with
// (sim/world.hpp, apps/sluice/sim_watchdog.hpp; docs/simulation.md, "Budgets").

#include "sim_watchdog.hpp"

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/sim/world.hpp>

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

using namespace sluice;
using namespace std::chrono_literals;

namespace {

// Runs `body` with a world made from `options` in a child process (a hang ends a simulated process:
// the world's hang report cannot unwind through the engine that found it) and returns the report.
std::string hang_report(sim::world_options options, std::function<void(sim::world&, runtime::engine&)> body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    const int out = fds[1];
    options.on_hang = [out](sim::world& w, const std::string& why) {
      const std::string text = std::to_string(w.steps()) + "\n" + why;
      (void)!::write(out, text.data(), text.size());
      ::_exit(0);
    };
    sim::world w(std::move(options));
    runtime::system_scope scope(w.kernel());
    {
      runtime::engine eng({.executors = 1, .handle_signals = false, .simulation = &w});
      body(w, eng);
    }
    const std::string text = std::to_string(w.steps()) + "\nno hang";
    (void)!::write(out, text.data(), text.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  return report;
}

std::uint64_t steps_of(const std::string& report) { return std::stoull(report.substr(0, report.find('\n'))); }

runtime::task<void> busy_loop() {
  for (;;) co_await runtime::yield();  // resumes itself for ever: nothing completes, time never jumps
}

runtime::task<void> sleep_for_ever() {
  for (;;) co_await runtime::sleep_for(1ms);  // time jumps at every timer: no busy loop, but no end
}

runtime::task<void> sleep_a_while(int times) {
  for (int i = 0; i < times; ++i) co_await runtime::sleep_for(1ms);
}

}  // namespace

TEST_CASE("a busy loop of a coroutine that resumes itself is a hang within the idle step budget") {
  sim::world_options options{.seed = 5};
  options.liveness_limit = 50ms;  // without the budget: a hang only at the liveness limit
  options.idle_step_limit = 1000;
  const std::string report = hang_report(options, [](sim::world&, runtime::engine& eng) { eng.block_on(busy_loop()); });
  INFO(report);
  CHECK(report.find("1000 steps in a row were turns of coroutines resuming one another") != std::string::npos);
  CHECK(report.find("a busy loop") != std::string::npos);
  CHECK(steps_of(report) == 1000);
}

TEST_CASE("a process that takes more steps than its budget is a hang with what it waits for") {
  sim::world_options options{.seed = 5};
  options.step_limit = 300;
  options.idle_step_limit = 1000;  // (each sleep's timer resets it: no busy loop here)
  const std::string report =
      hang_report(options, [](sim::world&, runtime::engine& eng) { eng.block_on(sleep_for_ever()); });
  INFO(report);
  CHECK(report.find("the process took 300 steps, its budget") != std::string::npos);
  CHECK(report.find("executor 0: 1 detached task(s)") != std::string::npos);  // what it waits for
  CHECK(steps_of(report) == 300);
}

TEST_CASE("a process within its step budgets ends without a hang") {
  sim::world_options options{.seed = 5};
  options.step_limit = 300;
  options.idle_step_limit = 50;
  const std::string report =
      hang_report(options, [](sim::world&, runtime::engine& eng) { eng.block_on(sleep_a_while(20)); });
  CHECK(report.find("no hang") != std::string::npos);
  CHECK(steps_of(report) < 300);
}

TEST_CASE("the world stops just before a given step and says what everything waited for") {
  sim::world_options options{.seed = 5};
  options.describe_at_step = 17;
  const std::string report =
      hang_report(options, [](sim::world&, runtime::engine& eng) { eng.block_on(sleep_for_ever()); });
  INFO(report);
  CHECK(report.find("what everything waited for just before step 17") != std::string::npos);
  CHECK(steps_of(report) == 17);
}

TEST_CASE("the alarm runs between two steps at its step and may be set again") {
  sim::world_options options{.seed = 5};
  std::vector<std::uint64_t> rang;
  options.alarm_at_step = 10;
  options.on_alarm = [&rang](sim::world& w) {
    rang.push_back(w.steps());
    if (rang.size() == 1) w.alarm_at_step(w.steps() + 5);
  };
  sim::world w(std::move(options));
  runtime::system_scope scope(w.kernel());
  {
    runtime::engine eng({.executors = 1, .handle_signals = false, .simulation = &w});
    eng.block_on(sleep_a_while(50));
  }
  CHECK(rang == std::vector<std::uint64_t>{10, 15});
}

namespace {

// Forks a child that publishes step 7, writes "partial" and then runs `stuck` for ever; returns what
// the watchdog made of it, and how the child ended.
struct watched_child {
  apps::simulate::watched_read read;
  int status = 0;
};

watched_child watch_stuck_child(void (*stuck)(), apps::simulate::watch_limits limits) {
  apps::simulate::shared_steps steps;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    steps.count().store(7);
    (void)!::write(fds[1], "partial", 7);
    stuck();
  }
  ::close(fds[1]);
  watched_child out;
  out.read = apps::simulate::read_watching(fds[0], pid, steps.count(), limits);
  ::close(fds[0]);
  ::waitpid(pid, &out.status, 0);
  return out;
}

void spin() {
  volatile std::uint64_t n = 0;
  for (;;) n = 1 + n;
}

void sleep_for_good() {
  for (;;) ::pause();
}

}  // namespace

TEST_CASE("the watchdog kills a process that spins inside one step and names the step") {
  // CPU time counts, not real time: 300 ms of it, with a real-time limit it cannot reach first.
  const watched_child c = watch_stuck_child(spin, {.cpu = 300ms, .wall = 600s});
  CHECK(c.read.stuck == apps::simulate::watched_read::spinning);
  CHECK(c.read.stuck_at_step == 7);
  CHECK(c.read.bytes == "partial");
  CHECK(WIFSIGNALED(c.status));
}

TEST_CASE("the watchdog kills a process blocked inside one step once the real-time limit passes") {
  // A blocked process uses no CPU: the CPU limit never passes, the real-time one does.
  const watched_child c = watch_stuck_child(sleep_for_good, {.cpu = 600s, .wall = 300ms});
  CHECK(c.read.stuck == apps::simulate::watched_read::blocked);
  CHECK(c.read.stuck_at_step == 7);
  CHECK(WIFSIGNALED(c.status));
}

TEST_CASE("the watchdog reads the report of a process that ends") {
  apps::simulate::shared_steps steps;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    steps.count().store(3);
    (void)!::write(fds[1], "report", 6);
    ::_exit(0);
  }
  ::close(fds[1]);
  const apps::simulate::watched_read r = apps::simulate::read_watching(fds[0], pid, steps.count(), {60s, 60s});
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(r.stuck == apps::simulate::watched_read::no);
  CHECK(r.bytes == "report");
  CHECK(WIFEXITED(status));
}
