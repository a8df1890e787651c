// The epoll backend (make_epoll_backend), driven directly through the io_backend protocol with real
// files, pipes and sockets: every op's result as the kernel reports it, cancels of a waiting recv,
// of a timeout and of a file op a thread already runs, a peer that hangs up, short sends on a full
// socket, idle connections that leave room for file I/O, and a close with a recv still waiting.

#include <sluice/runtime/admission.hpp>
#include <sluice/runtime/io_backend.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <poll.h>

#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

// A backend with ops it owns (stable addresses) and the order they completed in.
struct driver {
  explicit driver(unsigned cq_entries = 1024) {
    uring_options o;
    o.cq_entries = cq_entries;
    backend = make_epoll_backend(o);
  }
  ~driver() {
    // Nothing may be left in flight: a test that fails early cancels what it left behind.
    for (auto& op : ops) {
      if (!done(*op) && op->code != op_code::cancel) submit(cancel_of(*op));
    }
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (backend->outstanding() > 0 && std::chrono::steady_clock::now() < give_up) backend->poll(false);
  }

  io_op& make(op_code code, int fd = -1) {
    auto& op = *ops.emplace_back(std::make_unique<io_op>());
    op.code = code;
    op.fd = fd;
    op.offset = static_cast<std::uint64_t>(-1);
    op.user = this;
    op.complete = [](io_op& o) noexcept { static_cast<driver*>(o.user)->completed.push_back(&o); };
    return op;
  }
  io_op& cancel_of(io_op& target) {
    io_op& c = make(op_code::cancel);
    c.target = &target;
    c.internal = true;
    return c;
  }
  io_op& submit(io_op& op) {
    backend->submit(op);
    return op;
  }
  bool done(const io_op& op) const {
    for (const io_op* c : completed) {
      if (c == &op) return true;
    }
    return false;
  }
  // Polls (blocking at most `limit`) until `op` completed; its result.
  std::int32_t wait(io_op& op, std::chrono::milliseconds limit = 5000ms) {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (!done(op)) {
      if (std::chrono::steady_clock::now() > give_up) throw std::runtime_error("an op did not complete in time");
      io_op& guard = submit(make(op_code::timeout));
      guard.deadline = std::chrono::steady_clock::now() + 20ms;
      while (!done(guard)) backend->poll(true);
    }
    return op.result;
  }
  std::int32_t run(io_op& op) { return wait(submit(op)); }
  // A few polls without blocking (what is ready completes).
  void settle() {
    for (int i = 0; i < 5; ++i) {
      backend->poll(false);
      std::this_thread::sleep_for(1ms);
    }
  }
  std::size_t position(const io_op& op) const {
    for (std::size_t i = 0; i < completed.size(); ++i) {
      if (completed[i] == &op) return i;
    }
    return completed.size();
  }

  std::deque<std::unique_ptr<io_op>> ops;  // destroyed after the backend (its threads may hold one)
  std::vector<io_op*> completed;
  std::unique_ptr<io_backend> backend;
};

struct fd_pair {
  fd_pair() = default;
  fd_pair(const fd_pair&) = delete;
  fd_pair& operator=(const fd_pair&) = delete;
  ~fd_pair() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  void close(int i) {
    ::close(fds[i]);
    fds[i] = -1;
  }
  std::array<int, 2> fds{-1, -1};
};

void socket_pair(fd_pair& p) {
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.fds.data()) != 0) throw std::runtime_error("socketpair");
}

int tcp_listener(sockaddr_in& where) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  where = {};
  where.sin_family = AF_INET;
  where.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof where;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&where), sizeof where) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&where), &len) != 0) {
    throw std::runtime_error("listener");
  }
  return fd;
}

io_op& data_op(driver& d, op_code code, int fd, void* buf, std::size_t len, std::uint32_t flags = 0) {
  io_op& op = d.make(code, fd);
  op.buf = buf;
  op.len = static_cast<std::uint32_t>(len);
  op.flags = flags;
  return op;
}

}  // namespace

TEST_CASE("on epoll, file operations complete with the kernel's results", "[epoll]") {
  sluice::test::temp_dir dir;
  driver d;
  REQUIRE(d.run(d.make(op_code::nop)) == 0);

  const std::string path = dir.file("data");
  io_op& open = d.make(op_code::openat, AT_FDCWD);
  open.path = path.c_str();
  open.flags = O_RDWR | O_CREAT | O_CLOEXEC;
  open.mode = 0644;
  const int fd = d.run(open);
  REQUIRE(fd >= 0);

  char text[] = "hello, epoll";
  io_op& write = data_op(d, op_code::write, fd, text, 12);
  write.offset = 4;
  REQUIRE(d.run(write) == 12);
  REQUIRE(d.run(d.make(op_code::fsync, fd)) == 0);
  REQUIRE(d.run(d.make(op_code::fdatasync, fd)) == 0);

  char back[32] = {};
  io_op& read = data_op(d, op_code::read, fd, back, sizeof back);
  read.offset = 4;
  REQUIRE(d.run(read) == 12);  // a short read at the end of the file
  CHECK(std::string(back, 12) == "hello, epoll");

  struct statx st {};
  io_op& stat = d.make(op_code::statx, fd);
  stat.path = "";
  stat.flags = AT_EMPTY_PATH;
  stat.mode = STATX_SIZE;
  stat.buf = &st;
  REQUIRE(d.run(stat) == 0);
  CHECK(st.stx_size == 16);

  const std::string sub = dir.file("sub");
  auto make_dir = [&]() -> io_op& {
    io_op& mkdir = d.make(op_code::mkdirat, AT_FDCWD);
    mkdir.path = sub.c_str();
    mkdir.mode = 0755;
    return mkdir;
  };
  REQUIRE(d.run(make_dir()) == 0);
  REQUIRE(d.run(make_dir()) == -EEXIST);

  const std::string moved = sub + "/moved";
  io_op& rename = d.make(op_code::renameat, AT_FDCWD);
  rename.path = path.c_str();
  rename.fd2 = AT_FDCWD;
  rename.path2 = moved.c_str();
  REQUIRE(d.run(rename) == 0);
  CHECK(::access(moved.c_str(), F_OK) == 0);

  REQUIRE(d.run(d.make(op_code::close, fd)) == 0);
  REQUIRE(d.run(d.make(op_code::close, fd)) == -EBADF);

  io_op& unlink = d.make(op_code::unlinkat, AT_FDCWD);
  unlink.path = moved.c_str();
  REQUIRE(d.run(unlink) == 0);
  io_op& rmdir = d.make(op_code::unlinkat, AT_FDCWD);
  rmdir.path = sub.c_str();
  rmdir.flags = AT_REMOVEDIR;
  REQUIRE(d.run(rmdir) == 0);

  io_op& missing = d.make(op_code::openat, AT_FDCWD);
  missing.path = path.c_str();
  missing.flags = O_RDONLY | O_CLOEXEC;
  REQUIRE(d.run(missing) == -ENOENT);
  CHECK(d.backend->outstanding() == 0);
  CHECK(std::string(d.backend->name()) == "epoll");
}

TEST_CASE("on epoll, accept, connect, send, recv and shutdown work on real TCP sockets", "[epoll]") {
  driver d;
  sockaddr_in where{};
  fd_pair listener;
  listener.fds[0] = tcp_listener(where);
  const int flag_sets[] = {SOCK_CLOEXEC, SOCK_CLOEXEC | SOCK_NONBLOCK};
  for (const int accept_flags : flag_sets) {
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    io_op& accept = d.make(op_code::accept, listener.fds[0]);
    accept.buf = &peer;
    accept.addr_len = &peer_len;
    accept.flags = static_cast<std::uint32_t>(accept_flags);
    d.submit(accept);
    d.settle();
    CHECK_FALSE(d.done(accept));  // nobody connects yet: it waits

    fd_pair conn;
    conn.fds[0] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    io_op& connect = d.make(op_code::connect, conn.fds[0]);
    connect.buf = &where;
    connect.len = sizeof where;
    REQUIRE(d.run(connect) == 0);
    CHECK((::fcntl(conn.fds[0], F_GETFL) & O_NONBLOCK) == 0);  // its blocking mode is left as it was
    conn.fds[1] = d.wait(accept);
    REQUIRE(conn.fds[1] >= 0);
    CHECK(peer_len == sizeof(sockaddr_in));
    CHECK((::fcntl(conn.fds[1], F_GETFD) & FD_CLOEXEC) != 0);
    CHECK(((::fcntl(conn.fds[1], F_GETFL) & O_NONBLOCK) != 0) == ((accept_flags & SOCK_NONBLOCK) != 0));

    char in[16] = {};
    io_op& recv = data_op(d, op_code::recv, conn.fds[1], in, sizeof in);
    d.submit(recv);
    d.settle();
    CHECK_FALSE(d.done(recv));
    char hello[] = "hello";
    REQUIRE(d.run(data_op(d, op_code::send, conn.fds[0], hello, 5, MSG_NOSIGNAL)) == 5);
    REQUIRE(d.wait(recv) == 5);
    CHECK(std::string(in, 5) == "hello");

    // read and write of a socket go by readiness as well.
    char reply[] = "back";
    REQUIRE(d.run(data_op(d, op_code::write, conn.fds[1], reply, 4)) == 4);
    REQUIRE(d.run(data_op(d, op_code::read, conn.fds[0], in, sizeof in)) == 4);

    // MSG_DONTWAIT: -EAGAIN at once, never a wait.
    REQUIRE(d.run(data_op(d, op_code::recv, conn.fds[1], in, sizeof in, MSG_DONTWAIT)) == -EAGAIN);

    io_op& shut = d.make(op_code::shutdown, conn.fds[0]);
    shut.flags = SHUT_WR;
    REQUIRE(d.run(shut) == 0);
    REQUIRE(d.run(data_op(d, op_code::recv, conn.fds[1], in, sizeof in)) == 0);  // end of stream
  }

  // A refused connect reports the kernel's error.
  sockaddr_in closed{};
  {
    fd_pair gone;
    gone.fds[0] = tcp_listener(closed);
  }
  fd_pair conn;
  conn.fds[0] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  io_op& refused = d.make(op_code::connect, conn.fds[0]);
  refused.buf = &closed;
  refused.len = sizeof closed;
  REQUIRE(d.run(refused) == -ECONNREFUSED);
  CHECK(d.backend->outstanding() == 0);
}

TEST_CASE("on epoll, a waiting recv is cancelled: the target ends -ECANCELED before its cancel's 0", "[epoll]") {
  driver d;
  fd_pair p;
  socket_pair(p);
  char buf[8];
  io_op& recv = d.submit(data_op(d, op_code::recv, p.fds[0], buf, sizeof buf));
  d.settle();
  REQUIRE_FALSE(d.done(recv));
  io_op& cancel = d.submit(d.cancel_of(recv));
  REQUIRE(d.wait(cancel) == 0);
  REQUIRE(d.done(recv));
  CHECK(recv.result == -ECANCELED);
  CHECK(d.position(recv) < d.position(cancel));
  // A second cancel finds nothing.
  REQUIRE(d.run(d.cancel_of(recv)) == -ENOENT);
  // The descriptor still works: data sent now is read by the next recv.
  REQUIRE(::write(p.fds[1], "x", 1) == 1);
  REQUIRE(d.run(data_op(d, op_code::recv, p.fds[0], buf, sizeof buf)) == 1);
  CHECK(d.backend->outstanding() == 0);
}

TEST_CASE("on epoll, timeouts expire in deadline order with -ETIME and a cancelled one ends -ECANCELED",
          "[epoll][timer]") {
  driver d;
  const auto now = std::chrono::steady_clock::now();
  io_op& late = d.make(op_code::timeout);
  late.deadline = now + 30ms;
  io_op& early = d.make(op_code::timeout);
  early.deadline = now + 10ms;
  io_op& never = d.make(op_code::timeout);
  never.deadline = now + 1h;
  d.submit(late);
  d.submit(never);
  d.submit(early);
  while (!d.done(late)) d.backend->poll(true);  // sleeps in epoll until each deadline
  CHECK(std::chrono::steady_clock::now() >= now + 30ms);
  CHECK(early.result == -ETIME);
  CHECK(late.result == -ETIME);
  CHECK(d.position(early) < d.position(late));
  REQUIRE_FALSE(d.done(never));
  io_op& cancel = d.submit(d.cancel_of(never));
  d.backend->poll(false);
  REQUIRE(d.done(cancel));
  CHECK(cancel.result == 0);
  CHECK(never.result == -ECANCELED);
  CHECK(d.backend->outstanding() == 0);
}

TEST_CASE("on epoll, a file op a thread runs already ends with its real result, and a queued one is cancelled",
          "[epoll][cancel]") {
  driver d;
  fd_pair p;
  REQUIRE(::pipe2(p.fds.data(), O_CLOEXEC) == 0);
  // Fill the pipe: a blocking write to it (on a backend thread) then blocks until we read.
  ::fcntl(p.fds[1], F_SETFL, O_NONBLOCK);
  static char block[65536];
  std::size_t filled = 0;
  for (ssize_t n; (n = ::write(p.fds[1], block, sizeof block)) > 0;) filled += static_cast<std::size_t>(n);
  ::fcntl(p.fds[1], F_SETFL, 0);
  char ten[10] = {};
  // The backend has two threads: two writes block both, a third op waits in the queue.
  io_op& first = d.submit(data_op(d, op_code::write, p.fds[1], ten, sizeof ten));
  io_op& second = d.submit(data_op(d, op_code::write, p.fds[1], ten, sizeof ten));
  d.settle();
  std::this_thread::sleep_for(50ms);  // both threads are inside write(2) by now
  io_op& queued = d.submit(d.make(op_code::fsync, p.fds[0]));
  d.settle();
  io_op& cancel_running = d.submit(d.cancel_of(first));
  io_op& cancel_queued = d.submit(d.cancel_of(queued));
  d.settle();
  REQUIRE(d.done(cancel_running));
  REQUIRE(d.done(cancel_queued));
  CHECK(cancel_running.result == -EALREADY);
  CHECK(cancel_queued.result == 0);
  CHECK(queued.result == -ECANCELED);
  CHECK_FALSE(d.done(first));
  CHECK_FALSE(d.done(second));
  // Drain the pipe: both writes end with their real results.
  std::vector<char> sink(filled + 64);
  std::size_t drained = 0;
  while (drained < filled + 20) {
    const ssize_t n = ::read(p.fds[0], sink.data(), sink.size());
    REQUIRE(n > 0);
    drained += static_cast<std::size_t>(n);
  }
  CHECK(d.wait(first) == 10);
  CHECK(d.wait(second) == 10);
  CHECK(d.backend->outstanding() == 0);
}

TEST_CASE("on epoll, a peer that hangs up ends a waiting recv with 0 and a send with -EPIPE", "[epoll]") {
  driver d;
  fd_pair p;
  socket_pair(p);
  char buf[8];
  io_op& recv = d.submit(data_op(d, op_code::recv, p.fds[0], buf, sizeof buf));
  d.settle();
  REQUIRE_FALSE(d.done(recv));
  p.close(1);
  REQUIRE(d.wait(recv) == 0);
  REQUIRE(d.run(data_op(d, op_code::send, p.fds[0], buf, sizeof buf, MSG_NOSIGNAL)) == -EPIPE);
}

TEST_CASE("on epoll, a send on a full socket is short, and the next one waits until the peer reads", "[epoll]") {
  driver d;
  fd_pair p;
  socket_pair(p);
  const int small = 4096;
  ::setsockopt(p.fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  std::vector<char> big(1 << 20, 'x');
  const std::int32_t first = d.run(data_op(d, op_code::send, p.fds[0], big.data(), big.size(), MSG_NOSIGNAL));
  REQUIRE(first > 0);
  REQUIRE(static_cast<std::size_t>(first) < big.size());  // short: what the buffers took
  io_op& second = d.submit(data_op(d, op_code::send, p.fds[0], big.data(), big.size(), MSG_NOSIGNAL));
  d.settle();
  REQUIRE_FALSE(d.done(second));  // full: it waits, never fails with EAGAIN
  std::vector<char> sink(1 << 20);
  REQUIRE(::read(p.fds[1], sink.data(), sink.size()) > 0);
  const std::int32_t more = d.wait(second);
  CHECK(more > 0);
  CHECK(static_cast<std::size_t>(more) <= big.size());
}

TEST_CASE("on epoll, recvs on idle connections beyond the wait share leave room for a file write and an fsync",
          "[epoll][admission]") {
  sluice::test::temp_dir dir;
  driver d(32);  // as a 32-entry ring: 24 ordinary places, 21 of them waits
  REQUIRE(d.backend->capacity() == 24);
  std::vector<std::unique_ptr<fd_pair>> pairs;
  std::vector<io_op*> recvs;
  char buf[40][4];
  for (int i = 0; i < 40; ++i) {
    socket_pair(*pairs.emplace_back(std::make_unique<fd_pair>()));
    recvs.push_back(&d.submit(data_op(d, op_code::recv, pairs.back()->fds[0], buf[i], sizeof buf[i])));
  }
  const int fd = ::open(dir.file("state").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  char text[] = "checkpoint";
  io_op& write = data_op(d, op_code::write, fd, text, 10);
  write.offset = 0;
  REQUIRE(d.run(write) == 10);
  REQUIRE(d.run(d.make(op_code::fsync, fd)) == 0);
  CHECK(d.backend->outstanding() == 40);
  for (io_op* r : recvs) CHECK_FALSE(d.done(*r));
  // Peers speak: every recv ends, the queued ones after those that held places.
  for (auto& p : pairs) REQUIRE(::write(p->fds[1], "y", 1) == 1);
  for (io_op* r : recvs) CHECK(d.wait(*r) == 1);
  CHECK(d.backend->outstanding() == 0);
  ::close(fd);
}

TEST_CASE("on epoll, a close of a descriptor with a recv waiting ends the recv and never hangs", "[epoll]") {
  driver d;
  SECTION("closed alone: the recv ends -ECANCELED") {
    fd_pair p;
    socket_pair(p);
    char buf[4];
    io_op& recv = d.submit(data_op(d, op_code::recv, p.fds[0], buf, sizeof buf));
    d.settle();
    REQUIRE_FALSE(d.done(recv));
    io_op& close = d.submit(d.make(op_code::close, p.fds[0]));
    p.fds[0] = -1;
    REQUIRE(d.wait(close) == 0);
    REQUIRE(d.done(recv));
    CHECK(recv.result == -ECANCELED);
    CHECK(d.position(recv) < d.position(close));
  }
  SECTION("shut down, then closed (as io/ does): the recv sees the end of the stream") {
    fd_pair p;
    socket_pair(p);
    char buf[4];
    io_op& recv = d.submit(data_op(d, op_code::recv, p.fds[0], buf, sizeof buf));
    d.settle();
    REQUIRE(::shutdown(p.fds[0], SHUT_RDWR) == 0);
    io_op& close = d.submit(d.make(op_code::close, p.fds[0]));
    p.fds[0] = -1;
    REQUIRE(d.wait(close) == 0);
    CHECK(d.wait(recv) == 0);
  }
  SECTION("a recv still in the admission backlog: it ends -ECANCELED and never runs after the close") {
    driver small(8);  // 4 ordinary places, 3 of them waits
    std::vector<std::unique_ptr<fd_pair>> busy;
    char bufs[4][4];
    for (int i = 0; i < 3; ++i) {
      socket_pair(*busy.emplace_back(std::make_unique<fd_pair>()));
      small.submit(data_op(small, op_code::recv, busy.back()->fds[0], bufs[i], 4));
    }
    fd_pair p;
    socket_pair(p);
    io_op& queued = small.submit(data_op(small, op_code::recv, p.fds[0], bufs[3], 4));
    small.settle();
    REQUIRE_FALSE(small.done(queued));
    io_op& close = small.submit(small.make(op_code::close, p.fds[0]));
    p.fds[0] = -1;
    REQUIRE(small.wait(close) == 0);
    REQUIRE(small.done(queued));
    CHECK(queued.result == -ECANCELED);
    CHECK(small.position(queued) < small.position(close));
  }
  CHECK(d.backend->outstanding() == 0);
}

TEST_CASE("on epoll, reads of an eventfd and a pipe marked as waits end when written", "[epoll]") {
  driver d;
  fd_pair e;
  e.fds[0] = ::eventfd(0, EFD_CLOEXEC);
  std::uint64_t value = 0;
  io_op& read_event = data_op(d, op_code::read, e.fds[0], &value, sizeof value);
  read_event.waits = true;
  fd_pair p;
  REQUIRE(::pipe2(p.fds.data(), O_CLOEXEC) == 0);
  char c = 0;
  io_op& read_pipe = data_op(d, op_code::read, p.fds[0], &c, 1);
  read_pipe.waits = true;
  d.submit(read_event);
  d.submit(read_pipe);
  d.settle();
  REQUIRE_FALSE(d.done(read_event));
  REQUIRE_FALSE(d.done(read_pipe));
  std::thread writer([&] {
    std::this_thread::sleep_for(10ms);
    const std::uint64_t three = 3;
    (void)!::write(e.fds[0], &three, sizeof three);
    (void)!::write(p.fds[1], "z", 1);
  });
  CHECK(d.wait(read_event) == 8);
  CHECK(value == 3);
  CHECK(d.wait(read_pipe) == 1);
  CHECK(c == 'z');
  writer.join();
  // The writer gone: a read sees the end of the pipe.
  p.close(1);
  io_op& at_end = data_op(d, op_code::read, p.fds[0], &c, 1);
  at_end.waits = true;
  CHECK(d.run(at_end) == 0);
}

TEST_CASE("on epoll, a descriptor closed directly after a cancel and its number reused waits afresh", "[epoll]") {
  driver d;
  fd_pair first;
  socket_pair(first);
  char buf[4];
  io_op& recv = d.submit(data_op(d, op_code::recv, first.fds[0], buf, sizeof buf));
  d.settle();
  REQUIRE(d.run(d.cancel_of(recv)) == 0);
  REQUIRE(d.wait(recv) == -ECANCELED);
  const int number = first.fds[0];
  first.close(0);  // close(2), not the backend's close: epoll forgets it by itself
  fd_pair second;
  socket_pair(second);
  REQUIRE((second.fds[0] == number || second.fds[1] == number));
  const int reused = second.fds[0] == number ? 0 : 1;
  io_op& again = d.submit(data_op(d, op_code::recv, second.fds[reused], buf, sizeof buf));
  d.settle();
  REQUIRE_FALSE(d.done(again));
  REQUIRE(::write(second.fds[1 - reused], "ok", 2) == 2);
  CHECK(d.wait(again) == 2);
}

TEST_CASE("on epoll, a poll op shares its descriptor with a recv, ends with its revents, and a cancelled one ends -ECANCELED before its cancel",
          "[epoll][poll]") {
  driver d;
  fd_pair p;
  socket_pair(p);
  // Writable at once, whatever else waits on the descriptor.
  io_op& writable = d.make(op_code::poll, p.fds[0]);
  writable.flags = POLLIN | POLLOUT;
  REQUIRE((d.run(writable) & POLLOUT) != 0);
  // A poll for input and a recv wait together; one write ends both.
  char buf[8];
  io_op& readable = d.make(op_code::poll, p.fds[0]);
  readable.flags = POLLIN;
  d.submit(readable);
  io_op& recv = d.submit(data_op(d, op_code::recv, p.fds[0], buf, sizeof buf, MSG_PEEK));
  d.settle();
  REQUIRE_FALSE(d.done(readable));
  REQUIRE_FALSE(d.done(recv));
  REQUIRE(::write(p.fds[1], "x", 1) == 1);
  REQUIRE((d.wait(readable) & POLLIN) != 0);
  REQUIRE(d.wait(recv) == 1);
  REQUIRE(::recv(p.fds[0], buf, sizeof buf, 0) == 1);
  // Cancelled while waiting.
  io_op& waiting = d.make(op_code::poll, p.fds[0]);
  waiting.flags = POLLIN;
  d.submit(waiting);
  d.settle();
  REQUIRE_FALSE(d.done(waiting));
  io_op& cancel = d.submit(d.cancel_of(waiting));
  REQUIRE(d.wait(cancel) == 0);
  CHECK(waiting.result == -ECANCELED);
  CHECK(d.position(waiting) < d.position(cancel));
  // The peer hangs up: POLLHUP, whatever was asked.
  p.close(1);
  io_op& hup = d.make(op_code::poll, p.fds[0]);
  hup.flags = POLLIN;
  REQUIRE((d.run(hup) & POLLHUP) != 0);
  CHECK(d.backend->outstanding() == 0);
}
