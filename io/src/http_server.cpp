// See http_server.hpp.
//
// http-parser calls back into request_reader as it recognises the parts of a request; the parser is
// paused at the end of each request, so http_parser_execute returns there and the bytes after it
// (a pipelined request) wait in the connection's buffer for the next one. While the head is not
// complete, at most max_head_bytes are fed, so a head that does not end there is refused (431)
// without reading further.

#include <sluice/io/http_server.hpp>

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/system.hpp>
#include <sluice/runtime/timer.hpp>

#include <http_parser.h>

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <exception>
#include <optional>

namespace sluice::io {

namespace rt = sluice::runtime;

std::string_view http_reason(int status) noexcept {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

std::string_view http_request::header(std::string_view lower_name) const noexcept {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return {};
}

http_response http_response::text(int status, std::string body) {
  http_response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

namespace {

// One request, from the bytes of a connection.
class request_reader {
 public:
  enum class state { reading, complete, bad, head_too_large, body_too_large };

  explicit request_reader(const http_server_options& options) : options_(options) {
    http_parser_init(&parser_, HTTP_REQUEST);
    http_parser_settings_init(&settings_);
    settings_.on_url = &on_url;
    settings_.on_header_field = &on_header_field;
    settings_.on_header_value = &on_header_value;
    settings_.on_headers_complete = &on_headers_complete;
    settings_.on_body = &on_body;
    settings_.on_message_complete = &on_message_complete;
  }

  // Feeds bytes; returns how many were used (the rest belong to the next request).
  std::size_t feed(std::string_view bytes) {
    if (state_ != state::reading) return 0;
    std::size_t offer = bytes.size();
    if (!headers_complete_) offer = std::min(offer, options_.max_head_bytes - head_bytes_);
    if (offer == 0) return 0;  // (a length of 0 would tell the parser the stream ended)
    parser_.data = this;
    const std::size_t used = http_parser_execute(&parser_, &settings_, bytes.data(), offer);
    if (!headers_complete_) head_bytes_ += used;
    if (state_ != state::reading) return used;  // complete or too large
    const auto error = static_cast<http_errno>(parser_.http_errno);
    if (error != HPE_OK) {
      state_ = state::bad;
      why_ = fmt::format("{} ({})", http_errno_description(error), http_errno_name(error));
      return used;
    }
    if (!headers_complete_ && head_bytes_ >= options_.max_head_bytes) state_ = state::head_too_large;
    return used;
  }

  state status() const noexcept { return state_; }
  bool started() const noexcept { return started_; }
  const std::string& why() const noexcept { return why_; }
  http_request take() { return std::move(request_); }

 private:
  static request_reader& self(http_parser* p) { return *static_cast<request_reader*>(p->data); }
  static int on_url(http_parser* p, const char* at, std::size_t n) {
    self(p).request_.target.append(at, n);
    return 0;
  }
  static int on_header_field(http_parser* p, const char* at, std::size_t n) {
    auto& r = self(p);
    if (!r.in_field_) r.request_.headers.emplace_back();
    r.in_field_ = true;
    for (std::size_t i = 0; i < n; ++i) {
      r.request_.headers.back().first += static_cast<char>(std::tolower(static_cast<unsigned char>(at[i])));
    }
    return 0;
  }
  static int on_header_value(http_parser* p, const char* at, std::size_t n) {
    auto& r = self(p);
    r.in_field_ = false;
    if (!r.request_.headers.empty()) r.request_.headers.back().second.append(at, n);
    return 0;
  }
  static int on_headers_complete(http_parser* p) {
    auto& r = self(p);
    r.headers_complete_ = true;
    r.request_.method = http_method_str(static_cast<http_method>(p->method));
    r.request_.keep_alive = http_should_keep_alive(p) != 0;
    const std::string& t = r.request_.target;
    const std::size_t q = t.find('?');
    r.request_.path = t.substr(0, q);
    if (q != std::string::npos) r.request_.query = t.substr(q + 1);
    return 0;
  }
  static int on_body(http_parser* p, const char* at, std::size_t n) {
    auto& r = self(p);
    if (r.request_.body.size() + n > r.options_.max_body_bytes) {
      r.state_ = state::body_too_large;
      return 1;  // stops the parser
    }
    r.request_.body.append(at, n);
    return 0;
  }
  static int on_message_complete(http_parser* p) {
    auto& r = self(p);
    r.request_.keep_alive = http_should_keep_alive(p) != 0;
    r.state_ = state::complete;
    http_parser_pause(p, 1);  // one request per reader: execute returns right after it
    return 0;
  }

 public:
  void note_bytes() noexcept { started_ = true; }

 private:
  const http_server_options& options_;
  http_parser parser_{};
  http_parser_settings settings_{};
  http_request request_;
  std::size_t head_bytes_ = 0;
  bool headers_complete_ = false;
  bool in_field_ = false;
  bool started_ = false;
  state state_ = state::reading;
  std::string why_;
};

std::string serialize(const http_response& r, bool head_only, bool keep_alive) {
  std::string out;
  out.reserve(r.body.size() + 256);
  out.append(fmt::format("HTTP/1.1 {} {}\r\n", r.status, http_reason(r.status)));
  out.append("Server: sluice\r\n");
  if (!r.content_type.empty()) out.append("Content-Type: ").append(r.content_type).append("\r\n");
  out.append(fmt::format("Content-Length: {}\r\n", r.body.size()));
  out.append(keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
  for (const auto& [name, value] : r.headers) out.append(name).append(": ").append(value).append("\r\n");
  out.append("\r\n");
  if (!head_only) out.append(r.body);
  return out;
}

rt::task<result<std::size_t>> recv_some(tcp_stream* s, std::span<std::byte> into) { return s->recv(into); }
rt::task<result<void>> send_every(tcp_stream* s, std::span<const std::byte> bytes) { return s->send_all(bytes); }

}  // namespace

http_server::http_server(tcp_listener listener, http_handler handler, http_server_options options) noexcept
    : listener_(std::move(listener)), handler_(std::move(handler)), options_(options) {}

http_server::~http_server() = default;

result<std::unique_ptr<http_server>> http_server::listen(const address& local, http_handler handler,
                                                         http_server_options options) {
  if (options.max_head_bytes == 0 || options.max_connections == 0) {
    return error(std::make_error_code(std::errc::invalid_argument),
                 "http server: max_head_bytes and max_connections must be at least 1");
  }
  result<tcp_listener> listener = tcp_listener::listen(local);
  if (!listener) {
    return error(listener.error().code(),
                 fmt::format("listen on {}: {}", local.to_string(), listener.error().code().message()));
  }
  return std::unique_ptr<http_server>(new http_server(std::move(listener).value(), std::move(handler), options));
}

rt::task<void> http_server::run() {
  running_ = true;
  while (!stopping_) {
    result<tcp_stream> accepted = co_await listener_.accept();
    if (stopping_) break;
    if (!accepted) {
      const std::error_code code = accepted.error().code();
      if (code == std::errc::operation_canceled || code == std::errc::invalid_argument ||
          code == std::errc::bad_file_descriptor) {
        break;  // stopped: the listener was closed or the task cancelled
      }
      if (code == std::errc::connection_aborted) continue;  // reset before it was accepted
      // Out of descriptors, say: log, breathe, go on.
      rt::log::warn("http server {}: {}", listener_.local_address().to_string(), accepted.error().message());
      const bool slept = co_await rt::sleep_for(std::chrono::milliseconds(50));
      if (!slept) break;
      continue;
    }
    const bool room = connections_ < options_.max_connections || evict_idle();
    // A flood beyond twice the limit is not even told why (each 503 holds a descriptor a moment).
    if (!room && connections_ >= 2 * options_.max_connections) continue;  // closed as it goes
    ++connections_;
    if (!room) {
      connections_scope_.spawn(refuse(std::move(accepted).value()));
    } else {
      connections_scope_.spawn(serve(std::move(accepted).value()));
    }
  }
  connections_scope_.request_stop();
  co_await connections_scope_.join();
  if (listener_.is_open()) (void)co_await listener_.close();
  ended_.set();
}

bool http_server::evict_idle() noexcept {
  live_connection* oldest = nullptr;
  for (live_connection& c : live_) {
    if (c.idle && (oldest == nullptr || c.idle_since < oldest->idle_since)) oldest = &c;
  }
  if (oldest == nullptr) return false;
  oldest->idle = false;  // (not chosen twice)
  // Wakes its recv with the end of the stream: the connection ends and closes itself.
  (void)rt::sys().shutdown(oldest->stream->fd(), SHUT_RD);
  ++evicted_;
  return true;
}

rt::task<void> http_server::stop() {
  if (!stopping_) {
    stopping_ = true;
    connections_scope_.request_stop();
    (void)co_await listener_.close();  // wakes the accept (EINVAL)
  }
  if (running_) (void)co_await ended_.wait();
}

rt::task<bool> http_server::respond(tcp_stream* stream, const http_response& response, bool head_only,
                                    bool keep_alive) {
  const std::string bytes = serialize(response, head_only, keep_alive);
  std::optional<result<void>> sent =
      co_await rt::with_timeout(send_every(stream, std::as_bytes(std::span(bytes.data(), bytes.size()))),
                                options_.send_timeout);
  co_return sent.has_value() && sent->ok();
}

rt::task<void> http_server::refuse(tcp_stream stream) {
  http_response busy = http_response::text(503, "too many connections\n");
  busy.headers.emplace_back("Retry-After", "1");
  (void)co_await respond(&stream, busy, false, false);
  (void)co_await stream.close();
  --connections_;
}

rt::task<void> http_server::serve(tcp_stream stream) {
  (void)stream.set_nodelay(true);
  const auto me = live_.insert(live_.end(), live_connection{&stream, true, ++idle_order_});
  std::string pending;  // received, not yet parsed (pipelined requests)
  std::array<std::byte, 4096> chunk{};
  bool open = true;
  while (open && !stopping_) {
    request_reader reader(options_);
    if (!pending.empty()) reader.note_bytes();
    me->idle = pending.empty();
    me->idle_since = ++idle_order_;
    const auto deadline = rt::executor::current()->now() + options_.request_timeout;
    bool timed_out = false;
    bool ended = false;
    for (;;) {
      // (While the head is incomplete the reader takes at most max_head_bytes of it: feed again.)
      while (!pending.empty() && reader.status() == request_reader::state::reading) {
        const std::size_t used = reader.feed(pending);
        pending.erase(0, used);
        if (used == 0) break;
      }
      if (reader.status() != request_reader::state::reading) break;
      const auto left = deadline - rt::executor::current()->now();
      if (left <= std::chrono::nanoseconds(0)) {
        timed_out = true;
        break;
      }
      std::optional<result<std::size_t>> got = co_await rt::with_timeout(recv_some(&stream, chunk), left);
      if (!got) {
        timed_out = true;
        break;
      }
      if (!got->ok() || **got == 0) {
        ended = true;  // the peer closed or reset, or the server stops
        break;
      }
      reader.note_bytes();
      me->idle = false;
      pending.append(reinterpret_cast<const char*>(chunk.data()), **got);
    }
    if (stopping_ || ended) break;
    if (timed_out) {
      // An idle keep-alive connection just goes; one half-way through a request is told why.
      if (reader.started()) (void)co_await respond(&stream, http_response::text(408, "request timeout\n"), false, false);
      break;
    }
    http_response response;
    bool head_only = false;
    bool keep_alive = false;
    switch (reader.status()) {
      case request_reader::state::bad:
        response = http_response::text(400, "bad request: " + reader.why() + "\n");
        break;
      case request_reader::state::head_too_large:
        response = http_response::text(
            431, fmt::format("request head larger than {} bytes\n", options_.max_head_bytes));
        break;
      case request_reader::state::body_too_large:
        response = http_response::text(413, fmt::format("request body larger than {} bytes\n", options_.max_body_bytes));
        break;
      default: {
        http_request request = reader.take();
        request.peer = stream.peer();
        head_only = request.method == "HEAD";
        keep_alive = request.keep_alive;
        try {
          rt::task<http_response> handled = handler_(std::move(request));
          response = co_await std::move(handled);
        } catch (const std::exception& e) {
          rt::log::warn("http server {}: the handler failed: {}", listener_.local_address().to_string(), e.what());
          response = http_response::text(500, "internal error\n");
        }
        if (response.close) keep_alive = false;
        ++requests_;
      }
    }
    if (stopping_) break;
    open = co_await respond(&stream, response, head_only, keep_alive && !stopping_);
    open = open && keep_alive;
  }
  live_.erase(me);
  (void)co_await stream.close();
  --connections_;
}

}  // namespace sluice::io
