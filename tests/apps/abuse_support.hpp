#pragma once
// abuse_support: what a test needs to attack a worker's data port from outside (cluster_abuse_test;
// the worker processes are cluster_support.hpp's tool_process): plain blocking sockets from a
// chosen loopback source address (all of 127/8 is loopback on Linux, so "another host" is
// 127.0.0.2), a dialer's side of the hello (buffers/hello.hpp) written with the
// codec alone, the newest committed checkpoint of a directory, and a process's resident memory.
//
// Everything here blocks: it runs on the test's main thread, never on an executor.

#include "cluster_support.hpp"

#include <support/fd_limit.hpp>

#include <sluice/buffers/hello.hpp>
#include <sluice/buffers/tcp_transport.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

// VmRSS of `pid` in KiB (0 if it cannot be read: the process is gone).
inline std::size_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  }
  return 0;
}

// Lines of `text` that contain `needle`.
inline std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

// A blocking TCP connection from `from` (an IPv4 loopback address such as "127.0.0.2", port 0) to
// 127.0.0.1:`port`. Receives time out after 15 s, so a test cannot hang on a silent peer.
class raw_connection {
 public:
  raw_connection(const char* from, unsigned port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in src{};
    src.sin_family = AF_INET;
    ::inet_pton(AF_INET, from, &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<std::uint16_t>(port));
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{15, 0};
    (void)::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd_);
      throw std::runtime_error("connect from " + std::string(from) + " to port " + std::to_string(port) + ": " + why);
    }
    sockaddr_in me{};
    socklen_t len = sizeof me;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&me), &len);
    local_port_ = ntohs(me.sin_port);
  }
  raw_connection(raw_connection&& o) noexcept : fd_(std::exchange(o.fd_, -1)), local_port_(o.local_port_) {}
  raw_connection& operator=(raw_connection&&) = delete;
  ~raw_connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  unsigned local_port() const noexcept { return local_port_; }
  bool send(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Exactly `out.size()` bytes; false at the end of the stream, an error or the receive timeout.
  bool recv_exact(std::span<std::byte> out) {
    while (!out.empty()) {
      const ssize_t n = ::recv(fd_, out.data(), out.size(), 0);
      if (n <= 0) return false;
      out = out.subspan(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Reads until the peer closes the connection (true) or the receive timeout (false).
  bool recv_until_closed() {
    std::byte sink[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, sink, sizeof sink, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }
  // True when the peer has closed this connection (readable with nothing left), without blocking.
  bool closed_by_peer() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) return false;
    std::byte b;
    return ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
  }

 private:
  int fd_ = -1;
  unsigned local_port_ = 0;
};

// What a hand-driven dialer saw of the hello.
struct hello_attempt {
  unsigned local_port = 0;
  bool got_hello = false;     // the worker's hello arrived
  bool welcomed = false;      // ... and then its WELCOME: the connection would carry frames
  std::optional<buffers::hello_refusal> refused;  // its REFUSE, with the code
  std::string refuse_text;
  bool closed = false;        // the worker closed the connection (after its refusal, or instead)
};

namespace detail {
// The next hello message on `c`: its type and whole bytes; nullopt at the end of the stream.
inline std::optional<std::pair<buffers::hello_type, std::vector<std::byte>>> next_message(raw_connection& c) {
  std::vector<std::byte> m(buffers::hello_header_bytes);
  if (!c.recv_exact(m)) return std::nullopt;
  auto header = buffers::decode_hello_header(std::span<const std::byte, buffers::hello_header_bytes>(m.data(), m.size()));
  if (!header) return std::nullopt;
  m.resize(buffers::hello_header_bytes + header->body_bytes + 4);
  if (!c.recv_exact(std::span(m).subspan(buffers::hello_header_bytes))) return std::nullopt;
  return std::pair{header->type, std::move(m)};
}
}  // namespace detail

// Dials the worker at 127.0.0.1:`port` from `from` and runs the dialer's side of the hello as `me`
// (the real secret or not), with the codec of buffers/hello.hpp: hello, proof, then the worker's
// WELCOME or REFUSE. The worker's node id must sort before `me.node_id`, so the worker arbitrates.
inline hello_attempt dial_hello(const char* from, unsigned port, const buffers::hello_identity& me) {
  raw_connection c(from, port);
  hello_attempt out;
  out.local_port = c.local_port();
  std::array<std::byte, buffers::hello_nonce_bytes> nonce{};
  for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<std::byte>(i * 7 + 1);
  if (!c.send(buffers::encode_hello(me, nonce))) return out;
  std::optional<buffers::peer_hello> worker;
  for (;;) {
    auto m = detail::next_message(c);
    if (!m) {
      out.closed = true;
      return out;
    }
    if (m->first == buffers::hello_type::refuse) {
      auto r = buffers::decode_refuse_body(m->second);
      if (r) {
        out.refused = r->first;
        out.refuse_text = r->second;
      }
      out.closed = c.recv_until_closed();
      return out;
    }
    if (m->first == buffers::hello_type::welcome) {
      out.welcomed = true;
      return out;
    }
    if (m->first == buffers::hello_type::hello) {
      auto h = buffers::decode_hello_body(m->second);
      if (!h) return out;
      worker = *h;
      out.got_hello = true;
      const auto proof = buffers::hello_proof(me.secret, 'D', me.job, me.epoch, me.node_id, worker->node_id, nonce,
                                              worker->nonce);
      if (!c.send(buffers::encode_proof(proof))) return out;
    }
    // a proof from the worker: the answer to ours (WELCOME or REFUSE) comes next
  }
}

}  // namespace sluice::test
