#pragma once
// A neutral TCP echo load generator: one thread, no sluice and no Asio, so it treats every server
// alike. Each connection sends a message, waits for the complete echo (checking its bytes), and
// sends the next one: a closed loop with one request in flight per connection.
//
// Two engines drive the sockets:
// - uring (default): a raw liburing loop; each request is a send linked to a recv, and all
//   connections share one io_uring_enter per loop turn. It costs far less CPU per request than a
//   server does, so the server, not the generator, limits the rate.
// - epoll: non-blocking sockets with send/recv syscalls; it costs about as much as a server per
//   request, so with one core each the generator can become the bottleneck.

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::bench {

enum class tcp_load_engine { uring, epoll };

struct tcp_load_options {
  tcp_load_engine engine = tcp_load_engine::uring;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  unsigned connections = 64;
  unsigned message_bytes = 100;
  std::chrono::milliseconds duration{500};
};

struct tcp_load_result {
  std::uint64_t requests = 0;  // complete round trips inside the timed window
  double seconds = 0;          // the timed window (connections are made before it starts)
  double requests_per_s() const noexcept { return seconds > 0 ? static_cast<double>(requests) / seconds : 0; }
};

// Connects every connection, then runs the closed loop for `duration` and closes them all.
// Throws std::system_error naming the failing call (connect, send, recv, epoll) and the address;
// a wrong echo is a std::runtime_error.
tcp_load_result run_tcp_load(const tcp_load_options& options);

}  // namespace sluice::bench
