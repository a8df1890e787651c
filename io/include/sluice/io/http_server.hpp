#pragma once
// http_server: a small HTTP/1.1 server on io::tcp_listener and io::tcp_stream, for endpoints a
// runtime serves on its own executor (a job's /metrics): one coroutine per connection, no thread of
// its own. Requests are parsed with http-parser (nodejs/http-parser, Debian's libhttp-parser-dev).
//
// Protocol, per connection:
//   1. read until one request is whole (request line, headers, body); bytes past it stay buffered,
//      so pipelined requests are answered in order, one at a time;
//   2. call the handler (a coroutine: it may await, run_on other executors, ...) and send its
//      response with Content-Length; HEAD gets the headers of the response without its body;
//   3. keep the connection for the next request unless the client or the response says close.
// Limits (http_server_options): a request head larger than max_head_bytes is answered 431, a body
// larger than max_body_bytes 413, bytes that are not HTTP 400, and the connection is closed after
// each of these. A request must arrive whole within request_timeout of the moment the server
// started waiting for it, and a response must be taken within send_timeout, so a silent or slow
// client never keeps a connection for ever: an idle keep-alive connection is closed silently, one
// half-way through a request gets 408. At max_connections, a new connection takes the place of the
// one idle the longest (waiting for a request, none of it received), which is closed; if none is
// idle, the new one is answered 503 and closed. A handler that throws gives 500.
// Lifetime: listen() binds at once (a refusal names the address); run() serves on the calling
// executor until stop(), which closes the listener and every connection and returns once run()
// and every connection coroutine have ended. Everything runs on the executor run() runs on.
//
//   auto server = http_server::listen(address::parse("127.0.0.1:0").value(), handle).value();
//   log::info("on port {}", server->local_address().port());
//   scope s; s.spawn(server->run()); ...; co_await server->stop(); co_await s.join();

#include <sluice/io/address.hpp>
#include <sluice/io/result.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/task.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::io {

struct http_request {
  std::string method;  // "GET", "HEAD", "POST", ...
  std::string target;  // as sent: "/metrics?x=1"
  std::string path;    // the target without its query: "/metrics"
  std::string query;   // after '?', "" if none
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, in order
  std::string body;
  bool keep_alive = true;  // what the client asked (HTTP/1.1 default, Connection: close, HTTP/1.0)
  address peer;

  // The first header of that (lower-case) name, "" if none.
  std::string_view header(std::string_view lower_name) const noexcept;
};

struct http_response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones (Allow, Cache-Control, ...)
  std::string body;
  bool close = false;  // close the connection after this response

  static http_response text(int status, std::string body);
};

// Given each request, makes its response. Called on the server's executor; pass the request on
// by value to a coroutine (never a capturing lambda coroutine).
using http_handler = std::function<runtime::task<http_response>(http_request)>;

struct http_server_options {
  std::size_t max_head_bytes = 8192;    // request line and headers
  std::size_t max_body_bytes = 65536;
  std::size_t max_connections = 256;    // open at once
  std::chrono::milliseconds request_timeout{10'000};  // to receive one whole request (idle included)
  std::chrono::milliseconds send_timeout{10'000};     // to send one response
};

class http_server {
 public:
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Binds and listens (port 0: the kernel chooses, see local_address). Errors name the address:
  // "listen on 127.0.0.1:9100: Address already in use".
  static result<std::unique_ptr<http_server>> listen(const address& local, http_handler handler,
                                                     http_server_options options = {});

  address local_address() const noexcept { return listener_.local_address(); }
  // Accepts and serves until stop(); at most once.
  runtime::task<void> run();
  // Closes the listener and every connection (a response being sent is cut off) and returns once
  // run() (if it started) and every connection have ended. Idempotent.
  runtime::task<void> stop();

  std::size_t connections() const noexcept { return connections_; }
  std::uint64_t requests_served() const noexcept { return requests_; }
  // Idle connections closed to make room for new ones (max_connections).
  std::uint64_t evicted() const noexcept { return evicted_; }

 private:
  http_server(tcp_listener listener, http_handler handler, http_server_options options) noexcept;
  runtime::task<void> serve(tcp_stream stream);
  runtime::task<void> refuse(tcp_stream stream);
  runtime::task<bool> respond(tcp_stream* stream, const http_response& response, bool head_only, bool keep_alive);

  struct live_connection {
    tcp_stream* stream = nullptr;
    bool idle = true;             // waiting for a request, none of it received
    std::uint64_t idle_since = 0;  // order of becoming idle
  };
  // Makes room for a new connection: closes the one idle the longest; false if none is idle.
  bool evict_idle() noexcept;

  tcp_listener listener_;
  http_handler handler_;
  std::list<live_connection> live_;
  std::uint64_t idle_order_ = 0;
  std::uint64_t evicted_ = 0;
  http_server_options options_;
  runtime::scope connections_scope_;
  runtime::event ended_;
  std::size_t connections_ = 0;
  std::uint64_t requests_ = 0;
  bool running_ = false;
  bool stopping_ = false;
};

// The reason phrase of a status code ("Not Found"), "Unknown" if it has none here.
std::string_view http_reason(int status) noexcept;

}  // namespace sluice::io
