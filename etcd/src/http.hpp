#pragma once
// HTTP/1.1 for the etcd gateway (private to the etcd module): a POST request out, a response in,
// parsed incrementally by http-parser.
//
// - A request is written whole, with Content-Length; nothing is pipelined.
// - response_parser takes bytes as they arrive and yields the status, whether the connection may
//   be kept alive, and the body with any chunked framing removed. It stops at the end of one
//   response: bytes after it mean the connection cannot be trusted again (`trailing_bytes`).
// - The body held at once is bounded (`max_body_bytes`): a unary response is held whole, a stream
//   consumer takes complete lines from the front, so the bound is then per message.
// - Errors say what was wrong: http-parser's own description, a body over the bound, or a stream
//   that ended before the response did (with how many bytes had arrived).

#include <sluice/etcd/endpoint.hpp>
#include <sluice/io/result.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/task.hpp>

#include <http_parser.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace sluice::etcd::detail {

// "etcd <endpoint>: <call>: <cause>", with the cause's code.
io::error named_failure(const endpoint& where, const char* call, const io::error& cause);

class response_parser {
 public:
  explicit response_parser(std::size_t max_body_bytes);
  response_parser(const response_parser&) = delete;
  response_parser& operator=(const response_parser&) = delete;

  // Parses `bytes`; an error once the response is known to be malformed or too large.
  io::result<void> feed(std::string_view bytes);
  // The stream ended: completes a response delimited by the end of the connection, or fails.
  io::result<void> feed_end();

  bool headers_complete() const noexcept { return headers_complete_; }
  bool complete() const noexcept { return complete_; }
  int status() const noexcept { return status_; }
  bool keep_alive() const noexcept { return keep_alive_; }
  bool trailing_bytes() const noexcept { return trailing_bytes_; }
  std::size_t bytes_received() const noexcept { return received_; }
  // The body received so far, less what the consumer erased from its front.
  std::string& body() noexcept { return body_; }
  const std::string& body() const noexcept { return body_; }

 private:
  static int on_headers_complete(http_parser* p);
  static int on_body(http_parser* p, const char* at, std::size_t length);
  static int on_message_complete(http_parser* p);
  io::error malformed(std::string why) const;

  http_parser parser_{};
  http_parser_settings settings_{};
  std::size_t max_body_bytes_;
  std::size_t received_ = 0;
  std::string body_;
  int status_ = 0;
  bool headers_complete_ = false;
  bool complete_ = false;
  bool keep_alive_ = false;
  bool too_large_ = false;
  bool trailing_bytes_ = false;
};

// One connection to the gateway. Its errors carry the step ("connect: ...", "send: ...",
// "recv: ...") and the errno, not the address: the caller names the endpoint.
// The failure a non-200 response reports: the gateway's error text and gRPC code when its body
// says so, else errc::bad_response with the status and an excerpt of the body.
io::error gateway_failure(const response_parser& parser);

class http_connection {
 public:
  // `dead_peer`: io::tcp_stream::set_dead_peer_timeout (TCP endpoints; 0: none).
  static runtime::task<io::result<std::unique_ptr<http_connection>>> open(endpoint where,
                                                                        std::chrono::milliseconds dead_peer = {});

  // POST `path` with a JSON body.
  runtime::task<io::result<void>> send_post(std::string_view path, std::string_view body);
  // One receive into `parser` (`chunk` bytes at most); false when the stream ended (and
  // feed_end() accepted that).
  runtime::task<io::result<bool>> receive(response_parser* parser);
  // Reads until `parser` has a complete response.
  runtime::task<io::result<void>> read_response(response_parser* parser);
  // Never waits: true when an idle connection is still usable (nothing arrived, no end, no reset).
  runtime::task<bool> idle_and_intact();
  // Shuts the socket down and closes it: a receive waiting in another task ends.
  runtime::task<void> close();

  static constexpr std::size_t chunk = 64 * 1024;

 private:
  explicit http_connection(io::tcp_stream stream, std::string host) : stream_(std::move(stream)), host_(std::move(host)) {}

  io::tcp_stream stream_;
  std::string host_;
  std::string buffer_ = std::string(chunk, '\0');
};

}  // namespace sluice::etcd::detail
