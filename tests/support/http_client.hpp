#pragma once
// http_client: a plain blocking HTTP/1.1 client over a POSIX socket, for tests of HTTP endpoints
// (io::http_server, a job's /metrics) from another thread or process. Raw bytes go out as given,
// so a test can send pipelined, malformed or oversized requests; replies are read with
// Content-Length, keeping what follows for the next one. Every receive gives up after `timeout`.
//
//   http_client c(port);
//   c.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
//   std::optional<http_reply> r = c.read_reply();

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice::test {

struct http_reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class http_client {
 public:
  explicit http_client(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("http_client: socket failed");
    timeval tv{};
    tv.tv_sec = static_cast<long>(timeout.count() / 1000);
    tv.tv_usec = static_cast<long>(timeout.count() % 1000 * 1000);
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;
  ~http_client() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool connected() const { return connected_; }

  // False if the peer is gone (EPIPE, reset).
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // One reply, or nullopt if the connection ended (or timed out) before a whole one arrived.
  std::optional<http_reply> read_reply() {
    std::size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    http_reply r;
    const std::string head = buffer_.substr(0, head_end);
    buffer_.erase(0, head_end + 4);
    std::size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const std::size_t next = head.find("\r\n", line_end + 2);
      const std::string line = head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[name] = value;
      }
      line_end = next;
    }
    const std::string length = r.header("content-length");
    const std::size_t body_bytes = length.empty() ? 0 : std::stoul(length);
    if (!expect_body_) {
      expect_body_ = true;
      return r;
    }
    while (buffer_.size() < body_bytes) {
      if (!fill()) return std::nullopt;
    }
    r.body = buffer_.substr(0, body_bytes);
    buffer_.erase(0, body_bytes);
    return r;
  }

  // The next reply carries no body whatever its Content-Length says (the answer to a HEAD).
  void expect_no_body() { expect_body_ = false; }

  // True once the peer closed the connection (recv yields 0 or a reset) within the timeout, with
  // nothing more to read; false if bytes came or the wait timed out.
  bool closed_by_peer() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    if (n == 0) return true;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return true;
    return false;
  }

 private:
  bool fill() {
    char chunk[16384];
    for (;;) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buffer_.append(chunk, static_cast<std::size_t>(n));
      return true;
    }
  }

  int fd_ = -1;
  bool connected_ = false;
  bool expect_body_ = true;
  std::string buffer_;
};

// GET `path` on a connection of its own; nullopt if no reply came.
inline std::optional<http_reply> http_get(std::uint16_t port, const std::string& path) {
  http_client c(port);
  if (!c.connected()) return std::nullopt;
  if (!c.send("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) return std::nullopt;
  return c.read_reply();
}

}  // namespace sluice::test
