// TCP listener and stream through the ring (see tcp.hpp).
//
// A pending io_uring operation holds its own reference to its socket, so closing the descriptor
// alone neither ends that operation nor releases the socket: a listener would keep listening (and
// its accept waiting), a stream would keep its recv waiting and never send FIN. close() therefore
// shuts the socket down first: the kernel wakes the waiting operations (accept fails with EINVAL,
// recv yields 0, send fails with EPIPE) and a stream's peer sees the end of the stream. A stream
// set for an abortive close (SO_LINGER with a 0 timeout) is only shut down for reading: a FIN
// sent now would reach the peer before the reset, and the peer would read a clean end of stream.
//
// The synchronous calls (socket, setsockopt, bind, listen, getsockname, shutdown) go through the
// thread's runtime::sys(), so a simulation can stand in for the kernel.

#include <sluice/io/tcp.hpp>

#include "fd_ops.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace sluice::io {

using runtime::io_op;
using runtime::op_code;
using runtime::submit_op;
using runtime::sys;

namespace {

std::string context(const char* op, const address& a) { return std::string(op) + " " + a.to_string(); }

bool is_stream_family(int family) noexcept { return family == AF_INET || family == AF_INET6 || family == AF_UNIX; }

// IPPROTO_TCP for IP, the default (0) for Unix sockets.
int protocol_for(int family) noexcept { return family == AF_UNIX ? 0 : IPPROTO_TCP; }

// SO_LINGER on with a 0 timeout: closing sends a reset instead of a FIN.
bool aborts_on_close(int fd) noexcept {
  linger value{};
  socklen_t size = sizeof value;
  return sys().getsockopt(fd, SOL_SOCKET, SO_LINGER, &value, &size) == 0 && value.l_onoff != 0 && value.l_linger == 0;
}

io_op data_op(op_code code, int fd, const void* buf, std::size_t bytes, std::uint32_t flags) noexcept {
  io_op op = detail::data_op(code, fd, buf, bytes);
  op.flags = flags;
  return op;
}

}  // namespace

// --- tcp_stream --------------------------------------------------------------------------------

tcp_stream::tcp_stream(tcp_stream&& other) noexcept : fd_(std::exchange(other.fd_, -1)), peer_(other.peer_) {}

tcp_stream& tcp_stream::operator=(tcp_stream&& other) noexcept {
  if (this != &other) {
    close_now();
    fd_ = std::exchange(other.fd_, -1);
    peer_ = other.peer_;
  }
  return *this;
}

tcp_stream::~tcp_stream() { close_now(); }

void tcp_stream::close_now() noexcept {
  if (fd_ >= 0) detail::close_now(std::exchange(fd_, -1));
}

runtime::task<result<tcp_stream>> tcp_stream::connect(address peer) {
  if (!is_stream_family(peer.family())) co_return error::from_errno(EAFNOSUPPORT, context("connect", peer));
  const int fd = sys().socket(peer.family(), SOCK_STREAM | SOCK_CLOEXEC, protocol_for(peer.family()));
  if (fd < 0) co_return error::from_errno(-fd, context("socket for connect", peer));
  tcp_stream stream(fd, peer);  // closes the socket on every failure below
  io_op op = detail::make_op(op_code::connect, fd);
  op.buf = const_cast<sockaddr*>(peer.data());
  op.len = peer.size();
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, context("connect", peer));
  co_return std::move(stream);
}

runtime::task<result<std::size_t>> tcp_stream::recv(std::span<std::byte> buffer) {
  if (fd_ < 0) co_return detail::closed_error(context("recv from", peer_));
  if (buffer.empty()) co_return std::size_t{0};
  const std::int32_t rc = co_await submit_op(
      [&]() noexcept { return data_op(op_code::recv, fd_, buffer.data(), buffer.size(), 0); });
  if (rc < 0) co_return error::from_errno(-rc, context("recv from", peer_));
  co_return static_cast<std::size_t>(rc);
}

runtime::task<result<std::size_t>> tcp_stream::recv_exact(std::span<std::byte> buffer) {
  std::size_t total = 0;
  while (total < buffer.size()) {
    if (fd_ < 0) co_return detail::closed_error(context("recv from", peer_));
    const std::int32_t rc =
        co_await submit_op([&]() noexcept {
          return data_op(op_code::recv, fd_, buffer.data() + total, buffer.size() - total, 0);
        });
    if (rc < 0) co_return error::from_errno(-rc, context("recv from", peer_));
    if (rc == 0) {
      if (total == 0) co_return std::size_t{0};  // orderly end between messages
      co_return error::from_code(errc::unexpected_eof, context("recv from", peer_) + " (after " + std::to_string(total) +
                                                            " of " + std::to_string(buffer.size()) + " bytes)");
    }
    total += static_cast<std::size_t>(rc);
  }
  co_return total;
}

runtime::task<result<std::optional<std::size_t>>> tcp_stream::try_peek(std::span<std::byte> buffer) {
  if (fd_ < 0) co_return detail::closed_error(context("peek at", peer_));
  // An empty buffer could not tell "ended" (0) from "bytes waiting".
  if (buffer.empty()) co_return error::from_errno(EINVAL, context("peek at", peer_) + " with an empty buffer");
  const std::int32_t rc =
      co_await submit_op([&]() noexcept {
        return data_op(op_code::recv, fd_, buffer.data(), buffer.size(), MSG_PEEK | MSG_DONTWAIT);
      });
  if (rc == -EAGAIN || rc == -EWOULDBLOCK) co_return std::optional<std::size_t>{};
  if (rc < 0) co_return error::from_errno(-rc, context("peek at", peer_));
  co_return std::optional<std::size_t>(static_cast<std::size_t>(rc));
}

runtime::task<result<std::size_t>> tcp_stream::send(std::span<const std::byte> data) {
  if (fd_ < 0) co_return detail::closed_error(context("send to", peer_));
  if (data.empty()) co_return std::size_t{0};
  const std::int32_t rc = co_await submit_op(
      [&]() noexcept { return data_op(op_code::send, fd_, data.data(), data.size(), MSG_NOSIGNAL); });
  if (rc < 0) co_return error::from_errno(-rc, context("send to", peer_));
  co_return static_cast<std::size_t>(rc);
}

runtime::task<result<void>> tcp_stream::send_all(std::span<const std::byte> data) {
  while (!data.empty()) {
    if (fd_ < 0) co_return detail::closed_error(context("send to", peer_));
    const std::int32_t rc = co_await submit_op(
        [&]() noexcept { return data_op(op_code::send, fd_, data.data(), data.size(), MSG_NOSIGNAL); });
    if (rc < 0) co_return error::from_errno(-rc, context("send to", peer_));
    if (rc == 0) co_return error::from_code(errc::no_progress, context("send to", peer_));
    data = data.subspan(static_cast<std::size_t>(rc));
  }
  co_return success();
}

runtime::task<result<void>> tcp_stream::shutdown(int how) {
  if (fd_ < 0) co_return detail::closed_error(context("shutdown", peer_));
  io_op op = detail::make_op(op_code::shutdown, fd_);
  op.flags = static_cast<std::uint32_t>(how);
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, context("shutdown", peer_));
  co_return success();
}

runtime::task<result<void>> tcp_stream::close() {
  if (fd_ < 0) co_return success();
  const int fd = std::exchange(fd_, -1);
  (void)sys().shutdown(fd, aborts_on_close(fd) ? SHUT_RD : SHUT_RDWR);  // wakes waiting operations; see the top
  std::int32_t rc = co_await detail::close_op(fd);
  rc = detail::finish_close(fd, rc);
  if (rc < 0) co_return error::from_errno(-rc, context("close connection to", peer_));
  co_return success();
}

result<void> tcp_stream::set_nodelay(bool on) {
  if (fd_ < 0) return detail::closed_error(context("set TCP_NODELAY on connection to", peer_));
  if (peer_.family() == AF_UNIX) return success();  // no Nagle on Unix sockets
  const int value = on ? 1 : 0;
  if (const int rc = sys().setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &value, sizeof value); rc < 0) {
    return error::from_errno(-rc, context("set TCP_NODELAY on connection to", peer_));
  }
  return success();
}

result<void> tcp_stream::set_dead_peer_timeout(std::chrono::milliseconds after) {
  if (fd_ < 0) return detail::closed_error(context("set the dead-peer timeout on connection to", peer_));
  if (peer_.family() == AF_UNIX || after.count() <= 0) return success();
  const int idle_s = static_cast<int>(std::max<std::int64_t>(1, after.count() / 4000));
  const int user_ms = static_cast<int>(std::min<std::int64_t>(after.count(), 24 * 3600 * 1000));
  const int one = 1;
  const int probes = 9;  // (TCP_USER_TIMEOUT decides when probing stops)
  struct option {
    int level, name;
    const int* value;
    const char* what;
  };
  for (const option& o : {option{SOL_SOCKET, SO_KEEPALIVE, &one, "SO_KEEPALIVE"},
                          option{IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, "TCP_KEEPIDLE"},
                          option{IPPROTO_TCP, TCP_KEEPINTVL, &idle_s, "TCP_KEEPINTVL"},
                          option{IPPROTO_TCP, TCP_KEEPCNT, &probes, "TCP_KEEPCNT"},
                          option{IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, "TCP_USER_TIMEOUT"}}) {
    if (const int rc = sys().setsockopt(fd_, o.level, o.name, o.value, sizeof(int)); rc < 0) {
      return error::from_errno(-rc, context((std::string("set ") + o.what + " on connection to").c_str(), peer_));
    }
  }
  return success();
}

result<address> tcp_stream::local_address() const {
  if (fd_ < 0) return detail::closed_error(context("getsockname of connection to", peer_));
  sockaddr_storage storage{};
  socklen_t size = sizeof storage;
  if (const int rc = sys().getsockname(fd_, reinterpret_cast<sockaddr*>(&storage), &size); rc < 0) {
    return error::from_errno(-rc, context("getsockname of connection to", peer_));
  }
  return address::from_sockaddr(reinterpret_cast<const sockaddr*>(&storage), size);
}

// --- tcp_listener ------------------------------------------------------------------------------

tcp_listener::tcp_listener(tcp_listener&& other) noexcept : fd_(std::exchange(other.fd_, -1)), local_(other.local_) {}

tcp_listener& tcp_listener::operator=(tcp_listener&& other) noexcept {
  if (this != &other) {
    close_now();
    fd_ = std::exchange(other.fd_, -1);
    local_ = other.local_;
  }
  return *this;
}

tcp_listener::~tcp_listener() { close_now(); }

void tcp_listener::close_now() noexcept {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  (void)sys().shutdown(fd, SHUT_RDWR);  // see the top of this file
  detail::close_now(fd);
}

result<tcp_listener> tcp_listener::listen(const address& local, int backlog) {
  if (!is_stream_family(local.family())) return error::from_errno(EAFNOSUPPORT, context("listen on", local));
  runtime::system& os = sys();
  const int fd = os.socket(local.family(), SOCK_STREAM | SOCK_CLOEXEC, protocol_for(local.family()));
  if (fd < 0) return error::from_errno(-fd, context("socket for listener on", local));
  detail::unique_fd owned(fd);
  const int one = 1;
  if (local.family() != AF_UNIX) {
    if (const int rc = os.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); rc < 0) {
      return error::from_errno(-rc, context("set SO_REUSEADDR for listener on", local));
    }
  }
  if (const int rc = os.bind(fd, local.data(), local.size()); rc < 0) return error::from_errno(-rc, context("bind", local));
  if (const int rc = os.listen(fd, backlog); rc < 0) return error::from_errno(-rc, context("listen on", local));
  sockaddr_storage storage{};
  socklen_t size = sizeof storage;
  if (const int rc = os.getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &size); rc < 0) {
    return error::from_errno(-rc, context("getsockname of listener on", local));
  }
  return tcp_listener(owned.release(), address::from_sockaddr(reinterpret_cast<const sockaddr*>(&storage), size));
}

runtime::task<result<tcp_stream>> tcp_listener::accept() {
  if (fd_ < 0) co_return detail::closed_error(context("accept on", local_));
  sockaddr_storage peer{};
  socklen_t peer_size = sizeof peer;
  io_op op = detail::make_op(op_code::accept, fd_);
  op.buf = &peer;
  op.addr_len = &peer_size;
  op.flags = SOCK_CLOEXEC;
  // yields_fd: a connection accepted after a cancel is closed by the runtime.
  const std::int32_t rc = co_await submit_op(op, /*yields_fd=*/true);
  if (rc < 0) co_return error::from_errno(-rc, context("accept on", local_));
  co_return tcp_stream(rc, address::from_sockaddr(reinterpret_cast<const sockaddr*>(&peer), peer_size));
}

runtime::task<result<void>> tcp_listener::close() {
  if (fd_ < 0) co_return success();
  const int fd = std::exchange(fd_, -1);
  (void)sys().shutdown(fd, SHUT_RDWR);  // wakes a pending accept; see the top of this file
  std::int32_t rc = co_await detail::close_op(fd);
  rc = detail::finish_close(fd, rc);
  if (rc < 0) co_return error::from_errno(-rc, context("close listener on", local_));
  co_return success();
}

}  // namespace sluice::io
