// The neutral TCP echo load generator (see tcp_load.hpp).

#include "tcp_load.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace sluice::bench {
namespace {

using load_clock = std::chrono::steady_clock;

[[noreturn]] void fail(const char* what, const std::string& where, int err) {
  throw std::system_error(err, std::generic_category(), std::string(what) + " " + where);
}

class fd_guard {
 public:
  explicit fd_guard(int fd) noexcept : fd_(fd) {}
  fd_guard(fd_guard&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  fd_guard& operator=(fd_guard&&) = delete;
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// Connected blocking sockets with TCP_NODELAY.
std::vector<fd_guard> connect_all(const tcp_load_options& o, const std::string& where) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(o.port);
  if (::inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr) != 1) fail("parse address", where, EINVAL);
  std::vector<fd_guard> fds;
  fds.reserve(o.connections);
  for (unsigned i = 0; i < o.connections; ++i) {
    fd_guard fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP));
    if (fd.get() < 0) fail("socket for", where, errno);
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) fail("connect", where, errno);
    const int one = 1;
    if (::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) fail("TCP_NODELAY on", where, errno);
    fds.push_back(std::move(fd));
  }
  return fds;
}

struct connection {
  fd_guard fd;
  std::uint32_t seq = 0;
  unsigned sent = 0;
  unsigned received = 0;
  bool want_write = false;
};

std::uint8_t pattern(std::uint32_t seq, unsigned index, unsigned i) noexcept {
  return static_cast<std::uint8_t>(seq * 131u + index * 7u + i);
}

class epoll_generator {
 public:
  explicit epoll_generator(const tcp_load_options& o)
      : o_(o), where_(o.host + ":" + std::to_string(o.port)), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
    if (epoll_.get() < 0) fail("epoll_create1 for", where_, errno);
    if (o_.connections == 0 || o_.message_bytes == 0) throw std::invalid_argument("need connections and message bytes");
    send_buf_.resize(o_.message_bytes);
    recv_buf_.resize(o_.message_bytes);
    connect_all();
  }
  epoll_generator(const epoll_generator&) = delete;
  epoll_generator& operator=(const epoll_generator&) = delete;

  tcp_load_result run() {
    const auto start = load_clock::now();
    const auto deadline = start + o_.duration;
    for (unsigned i = 0; i < conns_.size(); ++i) start_request(i);
    std::vector<epoll_event> events(conns_.size());
    std::uint64_t requests = 0;
    while (load_clock::now() < deadline) {
      const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), 10);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("epoll_wait for", where_, errno);
      }
      for (int k = 0; k < n; ++k) {
        const unsigned i = events[static_cast<std::size_t>(k)].data.u32;
        const std::uint32_t ev = events[static_cast<std::size_t>(k)].events;
        if (ev & (EPOLLERR | EPOLLHUP)) fail("connection to", where_, ECONNRESET);
        if ((ev & EPOLLOUT) && conns_[i].want_write) write_some(i);
        if ((ev & EPOLLIN) && read_some(i)) {
          ++requests;
          start_request(i);
        }
      }
    }
    return {requests, std::chrono::duration<double>(load_clock::now() - start).count()};
  }

 private:
  void connect_all() {
    std::vector<fd_guard> fds = sluice::bench::connect_all(o_, where_);
    conns_.reserve(fds.size());
    for (unsigned i = 0; i < fds.size(); ++i) {
      fd_guard fd = std::move(fds[i]);
      if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK) != 0) fail("O_NONBLOCK on", where_, errno);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = i;
      if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) fail("epoll_ctl add", where_, errno);
      conns_.push_back(connection{std::move(fd)});
    }
  }

  void start_request(unsigned i) {
    connection& c = conns_[i];
    ++c.seq;
    c.sent = 0;
    c.received = 0;
    write_some(i);
  }

  void write_some(unsigned i) {
    connection& c = conns_[i];
    for (unsigned b = c.sent; b < o_.message_bytes; ++b) send_buf_[b] = pattern(c.seq, i, b);
    while (c.sent < o_.message_bytes) {
      const ssize_t n = ::send(c.fd.get(), send_buf_.data() + c.sent, o_.message_bytes - c.sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        fail("send to", where_, errno);
      }
      c.sent += static_cast<unsigned>(n);
    }
    const bool want = c.sent < o_.message_bytes;
    if (want != c.want_write) {
      epoll_event ev{};
      ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
      ev.data.u32 = i;
      if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) fail("epoll_ctl mod", where_, errno);
      c.want_write = want;
    }
  }

  // True when the whole echo of the current message has arrived (and matched).
  bool read_some(unsigned i) {
    connection& c = conns_[i];
    while (c.received < o_.message_bytes) {
      const ssize_t n = ::recv(c.fd.get(), recv_buf_.data(), o_.message_bytes - c.received, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
        fail("recv from", where_, errno);
      }
      if (n == 0) fail("recv from", where_, ECONNRESET);
      for (ssize_t k = 0; k < n; ++k) {
        if (recv_buf_[static_cast<std::size_t>(k)] != pattern(c.seq, i, c.received + static_cast<unsigned>(k))) {
          throw std::runtime_error("echo from " + where_ + " does not match what was sent");
        }
      }
      c.received += static_cast<unsigned>(n);
    }
    return true;
  }

  tcp_load_options o_;
  std::string where_;
  fd_guard epoll_;
  std::vector<connection> conns_;
  std::vector<std::uint8_t> send_buf_;
  std::vector<std::uint8_t> recv_buf_;
};

// The io_uring engine: per request a send linked to a recv; a short send or recv is continued with
// a new operation. user_data is (connection index << 1) | (0: send, 1: recv).
class uring_generator {
 public:
  explicit uring_generator(const tcp_load_options& o) : o_(o), where_(o.host + ":" + std::to_string(o.port)) {
    if (o_.connections == 0 || o_.message_bytes == 0) throw std::invalid_argument("need connections and message bytes");
    io_uring_params params{};
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int rc = io_uring_queue_init_params(2 * o_.connections + 8, &ring_, &params);
    if (rc == -EINVAL) {
      params = io_uring_params{};
      rc = io_uring_queue_init_params(2 * o_.connections + 8, &ring_, &params);
    }
    if (rc < 0) fail("io_uring_queue_init for load on", where_, -rc);
    try {
      fds_ = connect_all(o_, where_);
    } catch (...) {
      io_uring_queue_exit(&ring_);
      throw;
    }
    conns_.resize(fds_.size());
    send_bufs_.resize(fds_.size() * o_.message_bytes);
    recv_bufs_.resize(fds_.size() * o_.message_bytes);
  }
  ~uring_generator() {
    // Pending receives end once their sockets are shut down; reap them before the ring goes.
    for (auto& fd : fds_) ::shutdown(fd.get(), SHUT_RDWR);
    while (in_flight_ > 0) {
      __kernel_timespec ts{.tv_sec = 1, .tv_nsec = 0};
      io_uring_cqe* cqe = nullptr;
      if (io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr) < 0) break;
      reap([](std::uint64_t, int) {});
    }
    io_uring_queue_exit(&ring_);
  }
  uring_generator(const uring_generator&) = delete;
  uring_generator& operator=(const uring_generator&) = delete;

  tcp_load_result run() {
    const auto start = load_clock::now();
    const auto deadline = start + o_.duration;
    for (unsigned i = 0; i < conns_.size(); ++i) start_request(i);
    std::uint64_t requests = 0;
    bool running = true;
    while (running || in_flight_ > 0) {
      __kernel_timespec ts{.tv_sec = 0, .tv_nsec = 10'000'000};
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
      if (rc < 0 && rc != -ETIME && rc != -EINTR) fail("io_uring_submit_and_wait for load on", where_, -rc);
      reap([&](std::uint64_t data, int res) {
        const auto i = static_cast<unsigned>(data >> 1);
        if ((data & 1) == 0) {
          on_send(i, res);
        } else if (on_recv(i, res)) {
          if (running) ++requests;
          if (running) start_request(i);
        }
      });
      if (running && load_clock::now() >= deadline) {
        running = false;
        elapsed_ = std::chrono::duration<double>(load_clock::now() - start).count();
      }
    }
    return {requests, elapsed_};
  }

 private:
  struct state {
    std::uint32_t seq = 0;
    unsigned sent = 0;
    unsigned received = 0;
  };

  template <class F>
  void reap(F&& handle) {
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      --in_flight_;
      ++seen;
      handle(cqe->user_data, cqe->res);
    }
    io_uring_cq_advance(&ring_, seen);
  }

  io_uring_sqe* sqe() {
    io_uring_sqe* s = io_uring_get_sqe(&ring_);
    if (s == nullptr) {
      io_uring_submit(&ring_);
      s = io_uring_get_sqe(&ring_);
      if (s == nullptr) fail("io_uring_get_sqe for load on", where_, EBUSY);
    }
    ++in_flight_;
    return s;
  }

  std::uint8_t* send_buf(unsigned i) { return send_bufs_.data() + std::size_t{i} * o_.message_bytes; }
  std::uint8_t* recv_buf(unsigned i) { return recv_bufs_.data() + std::size_t{i} * o_.message_bytes; }

  void start_request(unsigned i) {
    state& c = conns_[i];
    ++c.seq;
    c.sent = 0;
    c.received = 0;
    for (unsigned b = 0; b < o_.message_bytes; ++b) send_buf(i)[b] = pattern(c.seq, i, b);
    submit_send(i, /*then_recv=*/true);
  }

  void submit_send(unsigned i, bool then_recv) {
    state& c = conns_[i];
    io_uring_sqe* s = sqe();
    io_uring_prep_send(s, fds_[i].get(), send_buf(i) + c.sent, o_.message_bytes - c.sent, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(s, std::uint64_t{i} << 1);
    if (then_recv) {
      s->flags |= IOSQE_IO_LINK;
      submit_recv(i);
    }
  }

  void submit_recv(unsigned i) {
    state& c = conns_[i];
    io_uring_sqe* s = sqe();
    io_uring_prep_recv(s, fds_[i].get(), recv_buf(i) + c.received, o_.message_bytes - c.received, 0);
    io_uring_sqe_set_data64(s, (std::uint64_t{i} << 1) | 1);
  }

  void on_send(unsigned i, int res) {
    if (res < 0) fail("send to", where_, -res);
    state& c = conns_[i];
    c.sent += static_cast<unsigned>(res);
    // A short send breaks the link (its recv completes with -ECANCELED): send the rest, then recv.
    if (c.sent < o_.message_bytes) submit_send(i, /*then_recv=*/true);
  }

  // True when the whole echo of the current message has arrived (and matched).
  bool on_recv(unsigned i, int res) {
    state& c = conns_[i];
    if (res == -ECANCELED && c.sent < o_.message_bytes) return false;  // its send was short
    if (res < 0) fail("recv from", where_, -res);
    if (res == 0) fail("recv from", where_, ECONNRESET);
    for (int k = 0; k < res; ++k) {
      if (recv_buf(i)[c.received + static_cast<unsigned>(k)] != pattern(c.seq, i, c.received + static_cast<unsigned>(k))) {
        throw std::runtime_error("echo from " + where_ + " does not match what was sent");
      }
    }
    c.received += static_cast<unsigned>(res);
    if (c.received < o_.message_bytes) {
      submit_recv(i);
      return false;
    }
    return true;
  }

  tcp_load_options o_;
  std::string where_;
  io_uring ring_{};
  std::vector<fd_guard> fds_;
  std::vector<state> conns_;
  std::vector<std::uint8_t> send_bufs_;
  std::vector<std::uint8_t> recv_bufs_;
  std::size_t in_flight_ = 0;
  double elapsed_ = 0;
};

}  // namespace

tcp_load_result run_tcp_load(const tcp_load_options& options) {
  if (options.engine == tcp_load_engine::uring) {
    uring_generator g(options);
    return g.run();
  }
  epoll_generator g(options);
  return g.run();
}

}  // namespace sluice::bench
