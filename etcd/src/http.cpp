// HTTP/1.1 requests and incremental responses over io::tcp_stream (see http.hpp).
//
// http-parser calls back into response_parser as it recognises parts of the response; the parser
// is paused at the end of the first response, so http_parser_execute returns there and whatever
// follows is noticed (trailing_bytes) instead of being parsed as a second response.

#include "http.hpp"

#include "json.hpp"

#include <sluice/etcd/errors.hpp>

#include <system_error>
#include <utility>

namespace sluice::etcd::detail {

namespace {

io::error step_error(const char* step, const io::error& cause) {
  return io::error(cause.code(), std::string(step) + ": " + cause.code().message());
}

}  // namespace

io::error named_failure(const endpoint& where, const char* call, const io::error& cause) {
  std::string message = "etcd ";
  message.append(where.text).append(": ").append(call).append(": ").append(cause.message());
  return io::error(cause.code(), std::move(message));
}

io::error gateway_failure(const response_parser& parser) {
  const std::string& body = parser.body();
  auto parsed = decode(body, [](const json& j) { return to_gateway_error(j); });
  if (parsed && parsed->has_value()) {
    const gateway_error& e = **parsed;
    return io::error(make_error_code(static_cast<grpc_code>(e.code)),
                     e.message + " (gRPC " + grpc_code_name(e.code) + ", HTTP " + std::to_string(parser.status()) + ")");
  }
  return io::error(make_error_code(errc::bad_response),
                   "HTTP status " + std::to_string(parser.status()) + ": '" + excerpt(body) + "'");
}

// --- response_parser ---------------------------------------------------------------------------

response_parser::response_parser(std::size_t max_body_bytes) : max_body_bytes_(max_body_bytes) {
  http_parser_init(&parser_, HTTP_RESPONSE);
  http_parser_settings_init(&settings_);
  settings_.on_headers_complete = &on_headers_complete;
  settings_.on_body = &on_body;
  settings_.on_message_complete = &on_message_complete;
}

int response_parser::on_headers_complete(http_parser* p) {
  auto* self = static_cast<response_parser*>(p->data);
  self->headers_complete_ = true;
  self->status_ = static_cast<int>(p->status_code);
  return 0;
}

int response_parser::on_body(http_parser* p, const char* at, std::size_t length) {
  auto* self = static_cast<response_parser*>(p->data);
  if (self->body_.size() + length > self->max_body_bytes_) {
    self->too_large_ = true;
    return 1;  // stops the parser: HPE_CB_body
  }
  self->body_.append(at, length);
  return 0;
}

int response_parser::on_message_complete(http_parser* p) {
  auto* self = static_cast<response_parser*>(p->data);
  self->complete_ = true;
  self->keep_alive_ = http_should_keep_alive(p) != 0;
  http_parser_pause(p, 1);  // one response only: execute returns right after it
  return 0;
}

io::error response_parser::malformed(std::string why) const {
  return io::error(make_error_code(errc::bad_response), "bad HTTP response: " + why);
}

io::result<void> response_parser::feed(std::string_view bytes) {
  if (complete_) {
    if (!bytes.empty()) trailing_bytes_ = true;
    return io::success();
  }
  received_ += bytes.size();
  parser_.data = this;
  const std::size_t parsed = http_parser_execute(&parser_, &settings_, bytes.data(), bytes.size());
  const auto error = static_cast<http_errno>(parser_.http_errno);
  if (too_large_) {
    return io::error(make_error_code(errc::response_too_large),
                     "response body larger than " + std::to_string(max_body_bytes_) + " bytes: refused");
  }
  if (complete_) {
    if (parsed < bytes.size()) trailing_bytes_ = true;
    return io::success();
  }
  if (error != HPE_OK) {
    return malformed(std::string(http_errno_description(error)) + " (" + http_errno_name(error) + ") after " +
                     std::to_string(received_ - bytes.size() + parsed) + " bytes");
  }
  return io::success();
}

io::result<void> response_parser::feed_end() {
  if (complete_) return io::success();
  parser_.data = this;
  http_parser_execute(&parser_, &settings_, nullptr, 0);  // completes a response that ends with the stream
  if (complete_) return io::success();
  std::string why = received_ == 0 ? "the connection closed before any response"
                                   : "the connection closed in the middle of the response (after " +
                                         std::to_string(received_) + " bytes)";
  return io::error(make_error_code(io::errc::unexpected_eof), std::move(why));
}

// --- http_connection ---------------------------------------------------------------------------

runtime::task<io::result<std::unique_ptr<http_connection>>> http_connection::open(endpoint where,
                                                                                  std::chrono::milliseconds dead_peer) {
  auto stream = co_await io::tcp_stream::connect(where.address);
  if (!stream) co_return step_error("connect", stream.error());
  if (auto nodelay = stream->set_nodelay(true); !nodelay) co_return step_error("set TCP_NODELAY", nodelay.error());
  if (auto silent = stream->set_dead_peer_timeout(dead_peer); !silent) {
    co_return step_error("set the dead-peer timeout", silent.error());
  }
  co_return std::unique_ptr<http_connection>(new http_connection(std::move(*stream), std::move(where.host)));
}

runtime::task<io::result<void>> http_connection::send_post(std::string_view path, std::string_view body) {
  std::string request;
  request.reserve(body.size() + 160);
  request.append("POST ").append(path).append(" HTTP/1.1\r\nHost: ").append(host_);
  request.append("\r\nContent-Type: application/json\r\nContent-Length: ").append(std::to_string(body.size()));
  request.append("\r\n\r\n").append(body);
  auto sent = co_await stream_.send_all(std::as_bytes(std::span(request.data(), request.size())));
  if (!sent) co_return step_error("send", sent.error());
  co_return io::success();
}

runtime::task<io::result<bool>> http_connection::receive(response_parser* parser) {
  auto n = co_await stream_.recv(std::as_writable_bytes(std::span(buffer_)));
  if (!n) co_return step_error("recv", n.error());
  if (*n == 0) {
    auto ended = parser->feed_end();
    if (!ended) co_return std::move(ended).error();
    co_return false;
  }
  auto fed = parser->feed(std::string_view(buffer_.data(), *n));
  if (!fed) co_return std::move(fed).error();
  co_return true;
}

runtime::task<io::result<void>> http_connection::read_response(response_parser* parser) {
  while (!parser->complete()) {
    auto more = co_await receive(parser);
    if (!more) co_return std::move(more).error();
    if (!*more) break;  // the response ended with the stream
  }
  co_return io::success();
}

runtime::task<bool> http_connection::idle_and_intact() {
  std::byte probe{};
  auto peeked = co_await stream_.try_peek(std::span(&probe, 1));
  co_return peeked.ok() && !peeked->has_value();
}

runtime::task<void> http_connection::close() { (void)co_await stream_.close(); }

}  // namespace sluice::etcd::detail
