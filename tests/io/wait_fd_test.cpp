// io::wait_fd: a one-shot readiness wait through the executor's backend (io_uring's poll, epoll's
// one-shot registration under SLUICE_BACKEND=epoll, poll(2) in test_backend).

#include <sluice/io/wait_fd.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace sluice::io;
using namespace std::chrono_literals;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::backend_kind;

namespace {

struct socket_pair {
  int fd[2] = {-1, -1};
  socket_pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0); }
  ~socket_pair() {
    for (int f : fd) if (f >= 0) ::close(f);
  }
  void close_peer() {
    ::close(fd[1]);
    fd[1] = -1;
  }
};

task<result<unsigned>> wait_once(int fd, unsigned events) { co_return co_await wait_fd(fd, events); }

task<void> write_later(int fd) {
  co_await sluice::runtime::sleep_for(5ms);
  REQUIRE(::write(fd, "x", 1) == 1);
}

task<result<unsigned>> wait_while_written(int wait_on, int write_to) {
  auto [r, done] = co_await sluice::runtime::when_all(wait_once(wait_on, POLLIN), write_later(write_to));
  (void)done;
  co_return r;
}

struct timed_out_then_ready {
  bool timed_out;
  unsigned later;
};

task<timed_out_then_ready> time_out_then_wait(int wait_on, int write_to) {
  auto first = co_await sluice::runtime::with_timeout(wait_once(wait_on, POLLIN), 20ms);
  REQUIRE(::write(write_to, "x", 1) == 1);
  auto second = co_await wait_fd(wait_on, POLLIN);
  co_return timed_out_then_ready{!first.has_value(), second.ok() ? second.value() : 0u};
}

}  // namespace

TEST_CASE("wait_fd returns at once with the revents of a descriptor that is ready", "[wait_fd]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  socket_pair s;
  REQUIRE(::write(s.fd[1], "x", 1) == 1);
  const auto r = sync_wait(wait_once(s.fd[0], POLLIN), sluice::test::backend_options(kind));
  REQUIRE(r.ok());
  REQUIRE((r.value() & POLLIN) != 0);
  const auto w = sync_wait(wait_once(s.fd[0], POLLIN | POLLOUT), sluice::test::backend_options(kind));
  REQUIRE(w.ok());
  REQUIRE((w.value() & POLLOUT) != 0);
}

TEST_CASE("wait_fd returns once the descriptor becomes readable later", "[wait_fd]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  socket_pair s;
  const auto r = sync_wait(wait_while_written(s.fd[0], s.fd[1]), sluice::test::backend_options(kind));
  REQUIRE(r.ok());
  REQUIRE((r.value() & POLLIN) != 0);
}

TEST_CASE("wait_fd cancelled by with_timeout returns and a later wait on the same descriptor still works", "[wait_fd][cancel]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  socket_pair s;
  const auto out = sync_wait(time_out_then_wait(s.fd[0], s.fd[1]), sluice::test::backend_options(kind));
  REQUIRE(out.timed_out);
  REQUIRE((out.later & POLLIN) != 0);
}

TEST_CASE("wait_fd reports POLLHUP when the peer closes and POLLERR on a pipe whose reader is gone", "[wait_fd]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  socket_pair s;
  s.close_peer();
  const auto hup = sync_wait(wait_once(s.fd[0], POLLIN), sluice::test::backend_options(kind));
  REQUIRE(hup.ok());
  REQUIRE((hup.value() & POLLHUP) != 0);

  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  ::close(p[0]);
  const auto err = sync_wait(wait_once(p[1], POLLOUT), sluice::test::backend_options(kind));
  ::close(p[1]);
  REQUIRE(err.ok());
  REQUIRE((err.value() & POLLERR) != 0);
}
