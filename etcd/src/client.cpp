// The etcd client's unary calls: one kept-alive connection, one call at a time, a timeout per call,
// and the retry rules of client.hpp.
//
// A call takes its turn (turn_, FIFO), then takes the idle connection out of the client (so a
// call that times out or fails simply drops it), checks that the server has not closed it
// meanwhile, sends the request, and reads one response. Only a complete keep-alive response with
// nothing after it puts the connection back. The retry decision needs two facts: whether the
// connection was reused, and how far the exchange got (not sent whole; sent, no response byte;
// some response).

#include <sluice/etcd/client.hpp>

#include "http.hpp"
#include "json.hpp"

#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/timer.hpp>

#include <utility>

namespace sluice::etcd {

using detail::named_failure;
using runtime::task;

struct client::unary_request {
  const char* path;
  std::string body;
  bool retry_after_send;  // read-only (or harmless to repeat) once the request reached the server
};

namespace {

// The semaphore's permit, handed back on every path out of a call.
class turn_guard {
 public:
  explicit turn_guard(runtime::semaphore* s) noexcept : s_(s) {}
  turn_guard(const turn_guard&) = delete;
  turn_guard& operator=(const turn_guard&) = delete;
  ~turn_guard() { s_->release(); }

 private:
  runtime::semaphore* s_;
};

// The connection ended (or was reset) before any byte of the response: the request may or may
// not have been processed.
bool ended_before_response(const io::error& e, const detail::response_parser& parser) {
  if (parser.bytes_received() != 0) return false;
  const std::error_code& c = e.code();
  return c == io::errc::unexpected_eof || c == std::errc::connection_reset || c == std::errc::broken_pipe;
}

}  // namespace

client::client(endpoint where, client_options options) : where_(std::move(where)), options_(options) {}

client::~client() = default;

void client::check_home() {
  runtime::executor* here = runtime::executor::current();
  if (home_ == nullptr) home_ = here;
  SLUICE_ASSERT(here != nullptr && here == home_, "an etcd client is used only on the executor it was first used on");
}

io::error client::fail(const char* call, const io::error& cause) const { return named_failure(where_, call, cause); }

task<io::result<std::string>> client::unary(const char* call, const char* path, std::string body, bool read_only) {
  check_home();
  const unary_request request{path, std::move(body), read_only};
  auto outcome = co_await runtime::with_timeout(exchange(&request), options_.request_timeout);
  if (!outcome) {  // the exchange was stopped and dropped its connection
    co_return fail(call, io::error(std::make_error_code(std::errc::timed_out),
                                   "timed out after " + std::to_string(options_.request_timeout.count()) + " ms"));
  }
  if (!*outcome) co_return fail(call, outcome->error());
  co_return std::move(**outcome);
}

task<io::result<std::string>> client::exchange(const unary_request* request) {
  const bool my_turn = co_await turn_.acquire();
  if (!my_turn) co_return io::error(std::make_error_code(std::errc::operation_canceled), "stopped waiting for the connection");
  turn_guard guard(&turn_);

  for (int attempt = 0;; ++attempt) {
    std::unique_ptr<detail::http_connection> conn = std::move(idle_);
    bool reused = conn != nullptr;
    if (reused) {
      const bool intact = co_await conn->idle_and_intact();
      if (!intact) {  // the server closed it while idle: nothing was sent, reconnect
        conn.reset();
        reused = false;
      }
    }
    if (!conn) {
      auto opened = co_await detail::http_connection::open(where_, options_.dead_peer_timeout);
      if (!opened) co_return std::move(opened).error();
      conn = std::move(*opened);
    }
    const bool may_retry = reused && attempt == 0;

    auto sent = co_await conn->send_post(request->path, request->body);
    if (!sent) {
      // No whole request reached the server (unless the call was stopped: then it ends here).
      if (may_retry && sent.error().code() != std::errc::operation_canceled) continue;
      co_return std::move(sent).error();
    }
    detail::response_parser parser(options_.max_response_bytes);
    auto read = co_await conn->read_response(&parser);
    if (!read) {
      if (may_retry && request->retry_after_send && ended_before_response(read.error(), parser)) continue;
      co_return std::move(read).error();
    }
    if (parser.keep_alive() && !parser.trailing_bytes()) idle_ = std::move(conn);
    if (parser.status() != 200) co_return detail::gateway_failure(parser);
    co_return std::move(parser.body());
  }
}

// --- the calls ---------------------------------------------------------------------------------

namespace {

// The response body read by `read`, or the failure named for the call.
template <class F>
io::result<std::invoke_result_t<F, const detail::json&>> decoded(const client& c, const char* call, const std::string& body,
                                                                  F read) {
  auto value = detail::decode(body, read);
  if (!value) return named_failure(c.where(), call, value.error());
  return value;
}

void nothing(const detail::json&) {}

}  // namespace

task<io::result<std::int64_t>> client::put(std::string key, std::string value, std::int64_t lease) {
  auto body = co_await unary("put", "/v3/kv/put", detail::put_body(key, value, lease), false);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "put", *body, detail::header_revision);
}

task<io::result<range_response>> client::get(std::string key, range_options options) {
  auto body = co_await unary("get", "/v3/kv/range", detail::range_body(key, {}, options), true);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "get", *body, detail::to_range);
}

task<io::result<range_response>> client::get_prefix(std::string prefix, range_options options) {
  const auto [key, end] = detail::prefix_range(prefix);
  auto body = co_await unary("get_prefix", "/v3/kv/range", detail::range_body(key, end, options), true);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "get_prefix", *body, detail::to_range);
}

task<io::result<std::int64_t>> client::del(std::string key) {
  auto body = co_await unary("del", "/v3/kv/deleterange", detail::delete_body(key, {}), false);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "del", *body, detail::to_deleted);
}

task<io::result<std::int64_t>> client::del_prefix(std::string prefix) {
  const auto [key, end] = detail::prefix_range(prefix);
  auto body = co_await unary("del_prefix", "/v3/kv/deleterange", detail::delete_body(key, end), false);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "del_prefix", *body, detail::to_deleted);
}

task<io::result<txn_response>> client::txn(std::vector<compare> compares, std::vector<op> success, std::vector<op> failure) {
  auto body = co_await unary("txn", "/v3/kv/txn", detail::txn_body(compares, success, failure), false);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "txn", *body, detail::to_txn);
}

task<io::result<lease>> client::lease_grant(std::int64_t ttl_seconds) {
  auto body = co_await unary("lease_grant", "/v3/lease/grant", detail::lease_grant_body(ttl_seconds), false);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "lease_grant", *body, detail::to_lease);
}

task<io::result<std::int64_t>> client::lease_keepalive(std::int64_t id) {
  // The gateway's keepalive is a stream: one request object in, one {"result": ...} (or
  // {"error": ...}) out, and the response ends with the request body.
  auto body = co_await unary("lease_keepalive", "/v3/lease/keepalive", detail::lease_id_body(id), true);
  if (!body) co_return std::move(body).error();
  auto message = decoded(*this, "lease_keepalive", *body, [](const detail::json& j) {
    return std::pair(detail::to_gateway_error(j), detail::to_keepalive_ttl(j));
  });
  if (!message) co_return std::move(message).error();
  if (const auto& e = message->first) {
    co_return fail("lease_keepalive", io::error(make_error_code(static_cast<grpc_code>(e->code)),
                                                e->message + " (gRPC " + grpc_code_name(e->code) + ")"));
  }
  if (message->second <= 0) {
    co_return fail("lease_keepalive", io::error(make_error_code(errc::lease_expired),
                                                "lease " + std::to_string(id) + " expired or unknown"));
  }
  co_return message->second;
}

task<io::result<void>> client::lease_revoke(std::int64_t id) {
  auto body = co_await unary("lease_revoke", "/v3/lease/revoke", detail::lease_id_body(id), false);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "lease_revoke", *body, nothing);
}

task<io::result<lease_ttl>> client::lease_time_to_live(std::int64_t id) {
  auto body = co_await unary("lease_time_to_live", "/v3/lease/timetolive", detail::lease_id_body(id), true);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "lease_time_to_live", *body, detail::to_lease_ttl);
}

task<io::result<void>> client::compact(std::int64_t revision, bool physical) {
  auto body = co_await unary("compact", "/v3/kv/compaction", detail::compact_body(revision, physical), false);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "compact", *body, nothing);
}

task<io::result<status_response>> client::status() {
  auto body = co_await unary("status", "/v3/maintenance/status", "{}", true);
  if (!body) co_return std::move(body).error();
  co_return decoded(*this, "status", *body, detail::to_status);
}

}  // namespace sluice::etcd
