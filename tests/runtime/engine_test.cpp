#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/fd_count.hpp>
#include <support/sanitizers.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

struct hops {
  std::size_t made = 0;
  std::size_t misplaced = 0;  // arrivals on an executor other than the target
};

task<hops> ping_pong(executor* a, executor* b, std::size_t messages) {
  hops h;
  while (h.made < messages) {
    co_await switch_to(*b);
    if (executor::current() != b) ++h.misplaced;
    ++h.made;
    co_await switch_to(*a);
    if (executor::current() != a) ++h.misplaced;
    ++h.made;
  }
  co_return h;
}

task<bool> sleep_until_stopped() { co_return co_await sleep_for(1h); }

task<void> read_forever(int fd) {
  char c;
  io_op op;
  op.code = op_code::read;
  op.fd = fd;
  op.buf = &c;
  op.len = 1;
  op.offset = static_cast<std::uint64_t>(-1);
  co_await submit_op(op);
}

}  // namespace

TEST_CASE("a task crosses between executors a million times", "[engine]") {
  constexpr std::uint64_t crossings = sluice::test::scaled_for_tsan(1'000'000);
  engine eng({.executors = 2, .handle_signals = false});
  const hops h = eng.block_on(ping_pong(&eng.at(0), &eng.at(1), crossings));
  REQUIRE(h.made == crossings);
  REQUIRE(h.misplaced == 0);
}

TEST_CASE("post runs a function on the target executor, from any thread", "[engine]") {
  engine eng({.executors = 2, .handle_signals = false});
  std::atomic<int> ran_on{-1};
  std::atomic<bool> done{false};
  eng.at(1).post([&] {
    ran_on = executor::current()->id();
    done = true;
    done.notify_one();
  });
  done.wait(false);
  REQUIRE(ran_on == 1);
}

TEST_CASE("SIGTERM stops the engine gracefully: waiting tasks see their stop token", "[engine]") {
  engine eng({.executors = 2});
  std::thread killer([] {
    std::this_thread::sleep_for(20ms);
    ::kill(::getpid(), SIGTERM);
  });
  const bool slept_fully = eng.block_on(sleep_until_stopped());
  killer.join();
  REQUIRE_FALSE(slept_fully);
  REQUIRE(eng.stop_signal() == SIGTERM);
}

namespace {
// The first SIGTERM stops the engine, and its watcher stops reading; the second is sent then.
task<bool> terminated_twice() {
  ::kill(::getpid(), SIGTERM);
  const bool slept_fully = co_await sleep_until_stopped();
  ::kill(::getpid(), SIGTERM);  // nobody reads this one while the engine runs
  co_return slept_fully;
}
}  // namespace

TEST_CASE("a SIGTERM that comes after the engine stopped reading signals is taken at its end, not left to kill the process", "[engine]") {
  // Left pending, it was delivered with its default action once the engine restored the signal
  // mask: the process died of SIGTERM after its job had ended (a second SIGTERM as a drain ended).
  {
    engine eng({.executors = 2});
    const bool slept_fully = eng.block_on(terminated_twice());
    REQUIRE_FALSE(slept_fully);
    REQUIRE(eng.stop_signal() == SIGTERM);
  }
  sigset_t pending;
  sigemptyset(&pending);
  REQUIRE(::sigpending(&pending) == 0);
  CHECK_FALSE(sigismember(&pending, SIGTERM));  // (and this process is still alive to check)
}

TEST_CASE("shutdown with I/O in flight on every executor leaks no frame and no descriptor", "[engine]") {
  const auto frames_before = live_frames();
  const auto fds_before = sluice::test::open_fd_count();
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  {
    engine eng({.executors = 2, .handle_signals = false});
    for (int i = 0; i < 100; ++i) {
      spawn_on(eng.at(i % 2), read_forever(fds[0]));
      spawn_on(eng.at(i % 2), []() -> task<void> { co_await sleep_for(1h); }());
    }
    std::this_thread::sleep_for(20ms);  // let them reach their reads and sleeps
  }  // destruction: stop, cancel, join
  ::close(fds[0]);
  ::close(fds[1]);
  REQUIRE(live_frames() == frames_before);
  REQUIRE(sluice::test::open_fd_count() == fds_before);
}

TEST_CASE("an engine defaults to one executor per CPU and can pin them", "[engine]") {
  engine eng({.pin_cpus = true, .handle_signals = false});
  REQUIRE(eng.size() == std::max(1u, std::thread::hardware_concurrency()));
}

TEST_CASE("when io_uring_setup is refused, the message names the cause and the fix", "[executor]") {
  auto sysctl = detail::describe_uring_setup_failure(EPERM, "2");
  REQUIRE_THAT(sysctl, Catch::Contains("EPERM") && Catch::Contains("kernel.io_uring_disabled is 2") &&
                           Catch::Contains("sysctl -w kernel.io_uring_disabled=0"));
  auto seccomp = detail::describe_uring_setup_failure(EPERM, "0");
  REQUIRE_THAT(seccomp, Catch::Contains("seccomp") && Catch::Contains("io_uring_setup"));
  auto missing = detail::describe_uring_setup_failure(ENOSYS, "");
  REQUIRE_THAT(missing, Catch::Contains("ENOSYS") && Catch::Contains("CONFIG_IO_URING"));
}

TEST_CASE("log lines carry the level and the executor id", "[log]") {
  int pipefd[2];
  REQUIRE(::pipe2(pipefd, O_CLOEXEC | O_NONBLOCK) == 0);
  const int saved = ::dup(2);
  ::dup2(pipefd[1], 2);
  const auto previous = log::level();
  log::set_level(log_level::info);
  log::info("outside {}", 1);
  log::debug("filtered out");
  {
    engine eng({.executors = 1, .handle_signals = false});
    std::atomic<bool> done{false};
    eng.at(0).post([&] {
      log::warn("inside {}", 2);
      done = true;
      done.notify_one();
    });
    done.wait(false);
  }
  log::set_level(previous);
  log::flush();  // the executor's line went to the log's writer thread
  ::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  char buf[4096] = {};
  const auto n = ::read(pipefd[0], buf, sizeof buf - 1);
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  REQUIRE(n > 0);
  const std::string out(buf, static_cast<std::size_t>(n));
  REQUIRE_THAT(out, Catch::Contains("info  -- outside 1") && Catch::Contains("warn  ex0 inside 2"));
  REQUIRE_THAT(out, !Catch::Contains("filtered out"));
}

TEST_CASE("an executor whose ring is full of long-lived operations is still woken by a post", "[engine]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  {
    engine_options o;
    o.executors = 1;
    o.handle_signals = false;
    o.uring.sq_entries = 8;
    o.uring.cq_entries = 16;  // ordinary ops are capped below this; the rest wait in the backlog
    engine eng(o);
    for (int i = 0; i < 50; ++i) spawn_on(eng.at(0), read_forever(fds[0]));
    std::this_thread::sleep_for(20ms);  // the executor now sleeps with its ring at the cap
    std::atomic<bool> ran{false};
    eng.at(0).post([&] {
      ran = true;
      ran.notify_one();
    });
    ran.wait(false);  // hangs if the wake-up read were stuck behind the cap
    REQUIRE(ran);
  }  // and 50 cancels get through a 16-entry CQ at shutdown
  ::close(fds[0]);
  ::close(fds[1]);
}

namespace {
sluice::runtime::task<int> where_am_i(sluice::runtime::engine* e) {
  co_return e->at(1).is_current() ? 1 : 0;
}
sluice::runtime::task<int> fails_there() {
  throw std::runtime_error("failed on the other executor");
  co_return 0;
}
struct run_on_seen {
  int there = -1;
  bool home_after = false;
  bool caught = false;
  bool home_after_failure = false;
};
sluice::runtime::task<void> run_on_body(sluice::runtime::engine* e, run_on_seen* seen) {
  seen->there = co_await sluice::runtime::run_on(&e->at(1), where_am_i(e));
  seen->home_after = e->at(0).is_current();
  try {
    (void)co_await sluice::runtime::run_on(&e->at(1), fails_there());
  } catch (const std::runtime_error&) {
    seen->caught = true;
  }
  seen->home_after_failure = e->at(0).is_current();
}
}  // namespace

TEST_CASE("run_on runs a task on another executor and comes back, also when it fails", "[engine]") {
  sluice::runtime::engine e({.executors = 2, .handle_signals = false});
  run_on_seen seen;
  e.block_on(run_on_body(&e, &seen));
  CHECK(seen.there == 1);
  CHECK(seen.home_after);
  CHECK(seen.caught);
  CHECK(seen.home_after_failure);  // a failure comes home too
}
