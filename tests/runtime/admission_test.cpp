// Ring admission (admission.hpp): waits that peers control take at most their share of a ring, so
// file writes, fsyncs and sends always find room; timers take no place at all. On the rule itself,
// on the test backend, and on a real io_uring with real sockets and files.

#include <sluice/runtime/admission.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

io_op op_of(op_code code) {
  io_op op;
  op.code = code;
  return op;
}

// Connected socket pairs: [i][0] is ours (recv waits on it), [i][1] the silent peer.
struct socket_pairs {
  explicit socket_pairs(int n) : fds(static_cast<std::size_t>(n)) {
    for (auto& p : fds) {
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.data()) != 0) throw std::runtime_error("socketpair");
    }
  }
  ~socket_pairs() {
    for (auto& p : fds) {
      for (int fd : p) {
        if (fd >= 0) ::close(fd);
      }
    }
  }
  // Each peer closes its end: every recv on ours ends (0, end of stream).
  void hang_up() {
    for (auto& p : fds) {
      ::close(p[1]);
      p[1] = -1;
    }
  }
  std::vector<std::array<int, 2>> fds;
};

task<void> recv_once(int fd, std::vector<int>* ended, int id) {
  std::array<std::byte, 16> buf{};
  io_op op = op_of(op_code::recv);
  op.fd = fd;
  op.buf = buf.data();
  op.len = static_cast<std::uint32_t>(buf.size());
  (void)co_await submit_op(op);
  ended->push_back(id);
}

task<void> sleep_once(std::chrono::nanoseconds d, int* fired) {
  const bool ok = co_await sleep_for(d);
  if (ok) ++*fired;
}

// Writes "checkpoint" at offset 0 of `fd` and fsyncs it; yields "write rc, fsync rc".
task<std::pair<int, int>> write_and_fsync(int fd) {
  static const char text[] = "checkpoint";
  io_op w = op_of(op_code::write);
  w.fd = fd;
  w.buf = const_cast<char*>(text);
  w.len = sizeof text - 1;
  w.offset = 0;
  const int written = co_await submit_op(w);
  io_op f = op_of(op_code::fsync);
  f.fd = fd;
  const int synced = co_await submit_op(f);
  co_return std::pair<int, int>{written, synced};
}

struct ring_report {
  std::size_t outstanding_while_waiting = 0;  // before the write: every recv submitted
  int written = 0;
  int synced = 0;
  std::size_t recvs_ended_before_write_done = 0;
  std::vector<int> ended;
  bool timed_out = false;
};

// `n` recvs on silent sockets, then a write and an fsync of `fd`; the peers hang up at the end.
task<ring_report> write_behind_idle_recvs(int n, socket_pairs* pairs, int fd) {
  ring_report report;
  scope waits;
  for (int i = 0; i < n; ++i) waits.spawn(recv_once(pairs->fds[static_cast<std::size_t>(i)][0], &report.ended, i));
  // Every recv submitted (plus the executor's own wake-up read).
  for (int turns = 0; executor::current()->backend().outstanding() < static_cast<std::size_t>(n) + 1 && turns < 1000;
       ++turns) {
    co_await yield();
  }
  report.outstanding_while_waiting = executor::current()->backend().outstanding();
  // A bound for the failure case only: without room for it, the write would never end.
  auto done = co_await with_timeout(write_and_fsync(fd), 20s);
  if (done) {
    report.written = done->first;
    report.synced = done->second;
  } else {
    report.timed_out = true;
  }
  report.recvs_ended_before_write_done = report.ended.size();
  pairs->hang_up();
  co_await waits.join();
  co_return report;
}

}  // namespace

TEST_CASE("waits may hold all of a ring but an eighth of it, and at least one place is left", "[admission]") {
  CHECK(wait_capacity_for(1016) == 889);
  CHECK(wait_capacity_for(1024) == 896);
  CHECK(wait_capacity_for(16) == 14);
  CHECK(wait_capacity_for(8) == 7);
  CHECK(wait_capacity_for(2) == 1);
  CHECK(wait_capacity_for(ring_admission::unlimited) == ring_admission::unlimited);
  CHECK(class_of(op_of(op_code::recv)) == op_class::wait);
  CHECK(class_of(op_of(op_code::accept)) == op_class::wait);
  CHECK(class_of(op_of(op_code::connect)) == op_class::wait);
  CHECK(class_of(op_of(op_code::poll)) == op_class::wait);  // a readiness wait (io::wait_fd): a peer decides when it ends
  CHECK(class_of(op_of(op_code::timeout)) == op_class::timer);
  for (op_code c : {op_code::write, op_code::read, op_code::fsync, op_code::fdatasync, op_code::send, op_code::close,
                    op_code::openat, op_code::renameat, op_code::statx, op_code::unlinkat}) {
    CHECK(class_of(op_of(c)) == op_class::prompt);
  }
  io_op signals = op_of(op_code::read);
  signals.waits = true;
  CHECK(class_of(signals) == op_class::wait);
  io_op wake = op_of(op_code::read);
  wake.internal = true;
  CHECK(class_of(wake) == op_class::internal);
}

TEST_CASE("waits stop at their share while prompt ops still enter, and each class keeps its order", "[admission]") {
  ring_admission a(8, 8);  // no reserve above the cap
  std::vector<io_op> recvs(10, op_of(op_code::recv));
  std::vector<io_op> writes(3, op_of(op_code::write));
  for (io_op& r : recvs) {
    if (a.may_enter(r)) a.entered(r); else a.defer(r);
  }
  CHECK(a.in_flight(op_class::wait) == 7);
  CHECK(a.backlog_size() == 3);
  // The eighth place is a prompt op's.
  REQUIRE(a.may_enter(writes[0]));
  a.entered(writes[0]);
  // The ring is full: the next write queues, in its own backlog, ahead of nothing.
  REQUIRE_FALSE(a.may_enter(writes[1]));
  a.defer(writes[1]);
  a.defer(writes[2]);
  REQUIRE(a.next() == nullptr);
  // A recv ends: its place goes to the queued write, not to the queued recvs (waits are at 6 of 7,
  // but the prompt backlog drains first).
  a.left(recvs[0]);
  REQUIRE(a.next() == &writes[1]);
  a.take(writes[1]);
  a.entered(writes[1]);
  REQUIRE(a.next() == nullptr);
  // Both writes end: the other write, then the first queued recv, in submission order.
  a.left(writes[0]);
  a.left(writes[1]);
  REQUIRE(a.next() == &writes[2]);
  a.take(writes[2]);
  a.entered(writes[2]);
  REQUIRE(a.next() == &recvs[7]);
  a.take(recvs[7]);
  a.entered(recvs[7]);
  CHECK(a.in_flight(op_class::wait) == 7);
  CHECK(a.next() == nullptr);
  // A cancelled recv leaves its backlog; the next in line is the one after it.
  REQUIRE(a.remove(&recvs[8]));
  a.left(recvs[1]);
  CHECK(a.next() == &recvs[9]);
}

TEST_CASE("prompt ops may borrow the internal reserve but its last places, waits never", "[admission]") {
  ring_admission a(8, 16);  // as io_uring with 16 CQ entries: 8 ordinary places, 8 reserved
  std::vector<io_op> recvs(10, op_of(op_code::recv));
  std::vector<io_op> writes(10, op_of(op_code::write));
  io_op wake = op_of(op_code::read);
  wake.internal = true;
  a.entered(wake);
  for (io_op& r : recvs) {
    if (a.may_enter(r)) a.entered(r); else a.defer(r);
  }
  CHECK(a.in_flight(op_class::wait) == 7);
  int writes_in = 0;
  for (io_op& w : writes) {
    if (!a.may_enter(w)) break;
    a.entered(w);
    ++writes_in;
  }
  // 1 wake-up read + 7 recvs + 6 writes = 14: the last 2 places stay free for internal ops.
  CHECK(writes_in == 6);
  CHECK(a.in_flight() == 14);
  io_op cancel = op_of(op_code::cancel);
  cancel.internal = true;
  REQUIRE(a.may_enter(cancel));
  a.entered(cancel);
  // Waits still stop at their share however much room the reserve has.
  a.left(writes[0]);
  a.left(writes[1]);
  CHECK(a.next() == nullptr);  // the queued recvs wait: waits are at 7 of 7
  CHECK_FALSE(a.has_room(recvs[9]));
}

TEST_CASE("timers take no place in a ring", "[admission]") {
  ring_admission a(2);
  std::vector<io_op> timers(1000, op_of(op_code::timeout));
  for (io_op& t : timers) {
    REQUIRE(a.may_enter(t));
    a.entered(t);
  }
  io_op recv = op_of(op_code::recv);
  io_op write = op_of(op_code::write);
  REQUIRE(a.may_enter(recv));
  a.entered(recv);
  REQUIRE(a.may_enter(write));
}

TEST_CASE("on the test backend, a ring full of recvs on silent sockets still writes and fsyncs a file at once",
          "[admission][test_backend]") {
  sluice::test::temp_dir dir;
  const int fd = ::open(dir.file("state").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  socket_pairs pairs(12);
  executor_options o;
  auto owned = std::make_unique<test_backend>();
  test_backend* backend = owned.get();
  // 8 places and a reserve of 2 above them, which prompt ops may not borrow: the write's room is
  // the place the wait share leaves (with io_uring's reserve of 8 it could borrow one as well).
  backend->set_capacity(8, 2);
  o.backend = std::move(owned);
  executor ex(std::move(o));  // outlives the checks on its backend
  const ring_report r = ex.block_on(write_behind_idle_recvs(12, &pairs, fd));
  ::close(fd);
  CHECK_FALSE(r.timed_out);
  CHECK(r.outstanding_while_waiting == 13);  // 12 recvs (7 in the ring, 5 queued) + the wake-up read
  CHECK(r.written == 10);
  CHECK(r.synced == 0);
  CHECK(r.recvs_ended_before_write_done == 0);  // the write did not wait for any peer
  // The recvs ended in order: the seven in the ring first, then the queued ones as places freed.
  REQUIRE(r.ended.size() == 12);
  CHECK(std::vector<int>(r.ended.begin() + 7, r.ended.end()) == std::vector<int>{7, 8, 9, 10, 11});
}

TEST_CASE("the test backend shows waits beyond their share as backlogged, and a cancel takes one out",
          "[admission][test_backend]") {
  socket_pairs pairs(3);
  executor_options o;
  auto owned = std::make_unique<test_backend>();
  test_backend* backend = owned.get();
  backend->set_capacity(2);  // one wait at most
  o.backend = std::move(owned);
  struct body {
    static task<void> run(socket_pairs* pairs, test_backend* backend) {
      std::vector<int> ended;
      scope waits;
      for (int i = 0; i < 3; ++i) waits.spawn(recv_once(pairs->fds[static_cast<std::size_t>(i)][0], &ended, i));
      while (backend->submitted(op_code::recv) < 3) co_await yield();
      io_op* first = backend->find(op_code::recv);
      REQUIRE(first != nullptr);
      CHECK(first->fd == pairs->fds[0][0]);
      CHECK(backend->admission().backlog_size() == 2);
      // Stop them all: the one in the ring is cancelled there, the queued ones leave their backlog.
      waits.request_stop();
      co_await waits.join();
      CHECK(ended.size() == 3);
      CHECK(backend->admission().backlog_size() == 0);
      CHECK(backend->performed(op_code::recv) == 0);
    }
  };
  sync_wait(body::run(&pairs, backend), std::move(o));
}

TEST_CASE("on io_uring, more recvs on silent sockets than the ring's wait share still leave room for a write and "
          "an fsync",
          "[admission][uring]") {
  sluice::test::temp_dir dir;
  const int fd = ::open(dir.file("state").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  // CQ 32: 24 ordinary ops in flight, 21 of them waits. 40 recvs: 21 in the ring, 19 queued.
  socket_pairs pairs(40);
  executor_options o;
  o.uring.sq_entries = 16;
  o.uring.cq_entries = 32;
  const ring_report r = sync_wait(write_behind_idle_recvs(40, &pairs, fd), std::move(o));
  char back[16] = {};
  const ssize_t n = ::pread(fd, back, sizeof back, 0);
  ::close(fd);
  CHECK_FALSE(r.timed_out);
  CHECK(r.outstanding_while_waiting == 41);
  CHECK(r.written == 10);
  CHECK(r.synced == 0);
  CHECK(r.recvs_ended_before_write_done == 0);
  CHECK(r.ended.size() == 40);
  CHECK(std::string(back, static_cast<std::size_t>(n > 0 ? n : 0)) == "checkpoint");
}

TEST_CASE("on io_uring, thousands of pending sleeps take no ring place and fire in deadline order",
          "[admission][uring][timer]") {
  sluice::test::temp_dir dir;
  const int fd = ::open(dir.file("state").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  executor_options o;
  o.uring.sq_entries = 8;
  o.uring.cq_entries = 16;  // 8 ordinary places
  struct body {
    static task<void> sleep_and_note(std::chrono::nanoseconds d, std::vector<int>* order, int id) {
      const bool ok = co_await sleep_for(d);
      if (ok) order->push_back(id);
    }
    static task<std::pair<int, int>> run(int fd) {
      std::vector<int> order;
      int long_fired = 0;
      scope timers;
      // 3000 sleeps far in the future, stopped at the end: they would fill any ring.
      for (int i = 0; i < 3000; ++i) timers.spawn(sleep_once(1h, &long_fired));
      // Short ones, submitted latest first: they fire earliest first.
      scope short_ones;
      for (int i = 5; i >= 1; --i) short_ones.spawn(sleep_and_note(std::chrono::milliseconds(2 * i), &order, i));
      co_await yield();
      auto done = co_await write_and_fsync(fd);
      co_await short_ones.join();
      CHECK(order == std::vector<int>{1, 2, 3, 4, 5});
      timers.request_stop();
      co_await timers.join();
      CHECK(long_fired == 0);
      co_return done;
    }
  };
  const auto [written, synced] = sync_wait(body::run(fd), std::move(o));
  ::close(fd);
  CHECK(written == 10);
  CHECK(synced == 0);
}
