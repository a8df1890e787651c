#pragma once
// TCP over io_uring: a listener that accepts and a stream that connects, sends and receives.
// The same two types carry Unix-domain stream sockets: give them a unix address
// (address::unix_path), and everything below holds for them too, except where noted.
//
// - socket/bind/listen/setsockopt are plain syscalls that never wait, made through the thread's
//   runtime::sys() (system.hpp). accept, connect, send, recv, shutdown and close are ring
//   operations, so nothing blocks the executor. Sockets stay in blocking mode: io_uring waits for
//   readiness itself, and a short transfer still completes at once.
// - Errors name the operation and the address: "connect 127.0.0.1:5000: Connection refused",
//   "recv from 127.0.0.1:41234: Connection reset by peer".
// - Sends use MSG_NOSIGNAL: writing to a reset peer is an EPIPE error, never a SIGPIPE.
// - Timeouts and cancellation come from the runtime: with_timeout(s.recv(buf), 5s), when_any, or a
//   stopping executor end an operation early (ECANCELED); an accepted descriptor that arrives after
//   a cancel is closed, so nothing leaks.
// - Both types are move-only. close() goes through the ring, and a stopping task's close still
//   runs; an object destroyed while open closes its descriptor synchronously (a destructor cannot
//   await). The object, and the buffer of an operation, must outlive the operation.
// - Unix sockets: listen binds the path (an existing file there fails with EADDRINUSE) and close
//   leaves the file in place: whoever chose the path removes it. set_nodelay is a no-op there
//   (no Nagle on Unix sockets); errors name the path ("connect unix:/run/x.sock: No such file or
//   directory").
//
//   auto listener = tcp_listener::listen(address::loopback_v4()).value();
//   auto client = co_await tcp_stream::connect(listener.local_address());
//   auto server = co_await listener.accept();

#include <sluice/io/address.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <sys/socket.h>

#include <cstddef>
#include <chrono>
#include <optional>
#include <span>

namespace sluice::io {

class tcp_stream {
 public:
  tcp_stream() noexcept = default;  // not connected
  tcp_stream(tcp_stream&& other) noexcept;
  tcp_stream& operator=(tcp_stream&& other) noexcept;
  tcp_stream(const tcp_stream&) = delete;
  tcp_stream& operator=(const tcp_stream&) = delete;
  ~tcp_stream();

  static runtime::task<result<tcp_stream>> connect(address peer);

  // One receive: yields the bytes received, 0 at orderly end of stream (or for an empty buffer).
  runtime::task<result<std::size_t>> recv(std::span<std::byte> buffer);
  // Fills `buffer` completely. Yields buffer.size(), or 0 if the stream ended before the first
  // byte; ending in the middle is an error (errc::unexpected_eof).
  runtime::task<result<std::size_t>> recv_exact(std::span<std::byte> buffer);
  // Never waits: copies the bytes already received into `buffer` without consuming them (n), or
  // yields 0 if the peer ended the stream, or nullopt if nothing has arrived. How a pooled idle
  // connection tells that its peer closed it (a reset is an error, ECONNRESET). `buffer` must hold
  // at least one byte (EINVAL otherwise).
  runtime::task<result<std::optional<std::size_t>>> try_peek(std::span<std::byte> buffer);
  // One send: may send fewer bytes than asked.
  runtime::task<result<std::size_t>> send(std::span<const std::byte> data);
  // Sends every byte, looping over short sends.
  runtime::task<result<void>> send_all(std::span<const std::byte> data);
  // shutdown(2): SHUT_WR sends FIN after queued data; the peer's recv then yields 0.
  runtime::task<result<void>> shutdown(int how = SHUT_WR);
  // Shuts the connection down (so an operation still waiting on it in another task ends: recv
  // yields 0, send fails with EPIPE; the peer sees the end of the stream), then closes through the
  // ring. The descriptor is released even if the close fails or is cancelled. Closing twice is a
  // no-op. With SO_LINGER 0 the peer still gets a reset (only reading is shut down first, so a
  // send still waiting in another task keeps the socket until it ends).
  runtime::task<result<void>> close();

  // TCP_NODELAY; a no-op on a Unix socket.
  result<void> set_nodelay(bool on);
  // A peer gone silent (a partition, a host that vanished: no reset, no FIN) ends the connection
  // with ETIMEDOUT after about `after`: TCP_USER_TIMEOUT (sent data unacknowledged that long) and
  // keepalive probes every after/4 (at least 1 s) once it is idle for after/4, so an idle
  // connection is probed too. A live peer answers the probes from its kernel, however busy or
  // backpressured it is. Without it a silent peer is noticed only by TCP's retransmission limit,
  // about 15 minutes. A no-op on a Unix socket, and with `after` 0.
  result<void> set_dead_peer_timeout(std::chrono::milliseconds after);
  address peer() const noexcept { return peer_; }
  result<address> local_address() const;
  bool is_open() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }

 private:
  friend class tcp_listener;
  tcp_stream(int fd, address peer) noexcept : fd_(fd), peer_(peer) {}
  void close_now() noexcept;

  int fd_ = -1;
  address peer_{};
};

class tcp_listener {
 public:
  tcp_listener() noexcept = default;  // not listening
  tcp_listener(tcp_listener&& other) noexcept;
  tcp_listener& operator=(tcp_listener&& other) noexcept;
  tcp_listener(const tcp_listener&) = delete;
  tcp_listener& operator=(const tcp_listener&) = delete;
  ~tcp_listener();

  // socket (CLOEXEC), SO_REUSEADDR (TCP only), bind, listen. Port 0 lets the kernel choose: see
  // local_address.
  static result<tcp_listener> listen(const address& local, int backlog = 1024);

  // The bound address, with the port the kernel chose.
  address local_address() const noexcept { return local_; }
  runtime::task<result<tcp_stream>> accept();
  // Wakes any accept still waiting on this listener (it fails with EINVAL), then closes through the
  // ring. Closing twice is a no-op.
  runtime::task<result<void>> close();

  bool is_open() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }

 private:
  tcp_listener(int fd, address local) noexcept : fd_(fd), local_(local) {}
  void close_now() noexcept;

  int fd_ = -1;
  address local_{};
};

}  // namespace sluice::io
