// Cancellation of in-flight operations: before submission, in flight (same thread and from another
// thread), after completion, and a descriptor that arrives after its cancel.

#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_any.hpp>

#include <support/fd_count.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <stop_token>
#include <thread>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

struct backend_fixture {
  test_backend* backend = nullptr;
  executor_options options() {
    executor_options o;
    auto b = std::make_unique<test_backend>();
    backend = b.get();
    o.backend = std::move(b);
    return o;
  }
};

task<int> one_nop() {
  io_op op;
  op.code = op_code::nop;
  co_return co_await submit_op(op);
}

task<int> read_pipe(int fd, char* buf) {
  io_op op;
  op.code = op_code::read;
  op.fd = fd;
  op.buf = buf;
  op.len = 1;
  op.offset = static_cast<std::uint64_t>(-1);
  co_return co_await submit_op(op);
}

task<int> open_file(const char* path) {
  io_op op;
  op.code = op_code::openat;
  op.fd = AT_FDCWD;
  op.path = path;
  op.flags = O_RDONLY | O_CLOEXEC;
  co_return co_await submit_op(op, /*yields_fd=*/true);
}

}  // namespace

TEST_CASE("an operation stopped before submission never reaches the backend", "[cancel]") {
  backend_fixture f;
  std::stop_source source;
  source.request_stop();
  executor ex(f.options());
  REQUIRE(ex.block_on(with_stop_token(one_nop(), source.get_token())) == -ECANCELED);
  REQUIRE(f.backend->submitted(op_code::nop) == 0);
  REQUIRE(f.backend->submitted(op_code::cancel) == 0);
}

TEST_CASE("an operation stopped in flight is cancelled and resumes after its own completion", "[cancel]") {
  backend_fixture f;
  std::stop_source source;
  executor ex(f.options());
  f.backend->set_auto(false);
  int idle_calls = 0;
  f.backend->on_idle = [&](test_backend&) {
    // The nop sits pending; the stop arrives while it is in flight.
    if (++idle_calls == 1) source.request_stop();
  };
  REQUIRE(ex.block_on(with_stop_token(one_nop(), source.get_token())) == -ECANCELED);
  REQUIRE(f.backend->submitted(op_code::nop) == 1);
  REQUIRE(f.backend->submitted(op_code::cancel) == 1);
  REQUIRE(f.backend->outstanding() == 1);  // only the executor's wake-up read is left
  f.backend->on_idle = nullptr;
}

TEST_CASE("a stop after completion changes nothing", "[cancel]") {
  backend_fixture f;
  std::stop_source source;
  executor ex(f.options());
  REQUIRE(ex.block_on(with_stop_token(one_nop(), source.get_token())) == 0);
  source.request_stop();
  REQUIRE(f.backend->submitted(op_code::cancel) == 0);
}

TEST_CASE("a real io_uring read is cancelled in flight by a stop from another thread", "[cancel]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  std::stop_source source;
  std::thread stopper([&] {
    std::this_thread::sleep_for(20ms);
    source.request_stop();  // runs the stop callback on this thread: it must post to the owner
  });
  char buf = 0;
  const int rc = sync_wait(with_stop_token(read_pipe(fds[0], &buf), source.get_token()));
  stopper.join();
  REQUIRE(rc == -ECANCELED);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("a real io_uring read stopped by a timeout ends and nothing is left in flight", "[cancel]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  char buf = 0;
  const auto before = live_frames();
  auto r = sync_wait(with_timeout(read_pipe(fds[0], &buf), 5ms));
  REQUIRE_FALSE(r.has_value());
  REQUIRE(live_frames() == before);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("a descriptor that arrives after its cancel is closed, not leaked", "[cancel]") {
  backend_fixture f;
  std::stop_source source;
  executor ex(f.options());
  f.backend->set_auto(false);
  f.backend->set_cancel_too_late(true);
  int idle_calls = 0;
  f.backend->on_idle = [&](test_backend& b) {
    if (++idle_calls == 1) {
      source.request_stop();  // the cancel loses the race: the open still completes
    } else if (io_op* open = b.find(op_code::openat)) {
      b.perform(*open);
    }
  };
  const auto fds_before = sluice::test::open_fd_count();
  REQUIRE(ex.block_on(with_stop_token(open_file("/proc/self/status"), source.get_token())) == -ECANCELED);
  REQUIRE(f.backend->performed(op_code::openat) == 1);
  REQUIRE(sluice::test::open_fd_count() == fds_before);
  f.backend->on_idle = nullptr;
}

TEST_CASE("a cancel completion is never taken for its target's completion", "[cancel]") {
  // The cancel completes first (too late: -EALREADY); the target completes afterwards with its real
  // result, which is what the awaiter must see.
  backend_fixture f;
  std::stop_source source;
  executor ex(f.options());
  f.backend->set_auto(false);
  f.backend->set_cancel_too_late(true);
  int idle_calls = 0;
  f.backend->on_idle = [&](test_backend& b) {
    if (++idle_calls == 1) {
      source.request_stop();
    } else if (io_op* nop = b.find(op_code::nop)) {
      b.complete(*nop, 0);
    }
  };
  REQUIRE(ex.block_on(with_stop_token(one_nop(), source.get_token())) == 0);
  REQUIRE(f.backend->submitted(op_code::cancel) == 1);
  f.backend->on_idle = nullptr;
}
