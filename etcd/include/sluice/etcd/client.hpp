#pragma once
// client: etcd 3.4's JSON gateway (the HTTP/1.1 face of its gRPC API), spoken over the runtime's
// own sockets, TCP or a Unix socket. It is how the processes of one sluice job coordinate: the
// leader's lease, membership, and the pointer to the latest completed checkpoint.
//
// One client lives on one executor: it is used only there (asserted), and must outlive its calls.
// Every call is an io_uring exchange: nothing blocks the executor.
//
// Requests (put, get, txn, lease and maintenance calls):
// - Unary calls share one keep-alive connection and run one at a time, in call order (FIFO).
// - Each call is bounded by options.request_timeout, from the call to its answer (waiting for the
//   connection and reconnecting included). A call that times out fails with std::errc::timed_out
//   and closes the connection; its effect on the server is then unknown.
// - Responses are bounded by options.max_response_bytes (errc::response_too_large).
// - Retries: a call is retried once, on a new connection, only when it cannot have reached the
//   server, or cannot change anything there:
//     * the idle connection turned out closed or reset by the server before the request was sent
//       (checked without waiting, just before it is used): every call reconnects transparently;
//     * sending the request failed (the server never received a whole request): every call;
//     * the reused connection ended before any byte of the response: only read-only calls (get,
//       get_prefix, status, lease_time_to_live) and lease_keepalive (renewing twice is harmless).
//   put, del, txn, lease_grant, lease_revoke and compact are never retried once the request may
//   have reached the server: they fail, and the caller decides (a txn fenced by a compare can be
//   re-run safely; a plain put may have been applied).
//   A failed connect is not retried: the server is not there.
// - Errors name the endpoint and the call, then the cause: "etcd unix:///run/j/client.sock:0: txn:
//   connect: No such file or directory", or the server's own text and gRPC code ("etcd ...:
//   lease_revoke: etcdserver: requested lease not found (gRPC NOT_FOUND)"; code() is the
//   etcd::grpc_code). See errors.hpp.
//
// Watches (watch.hpp) get their own streaming connection each; creating one is bounded by the
// request timeout and never retried.
//
// GCC 12: a braced list holding a string literal inside a co_await expression fails to compile
// ("array used as initializer"): build the compare and op vectors in locals first.
//
//   auto c = etcd::client(etcd::client::parse_endpoint("unix:///run/j/client.sock:0").value(), {});
//   auto l = (co_await c.lease_grant(10)).value();
//   auto t = (co_await c.txn({etcd::compare::missing("/job/leader")},
//                            {etcd::op::put("/job/leader", me, l.id)}, {})).value();

#include <sluice/etcd/endpoint.hpp>
#include <sluice/etcd/errors.hpp>
#include <sluice/etcd/types.hpp>
#include <sluice/etcd/watch.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/semaphore.hpp>
#include <sluice/runtime/task.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::runtime {
class executor;
}

namespace sluice::etcd {

namespace detail {
class http_connection;
}

struct client_options {
  std::chrono::milliseconds request_timeout{5000};
  std::size_t max_response_bytes = 16u << 20;  // per response; per message of a watch
  // A connection to etcd gone silent (a partition, a NAT or load balancer that dropped an idle
  // connection: no reset) fails after about this long, also while idle (keepalive probes:
  // io::tcp_stream::set_dead_peer_timeout); a watch on it then fails and its owner reopens it.
  // Without it, a watch on such a path would wait forever. TCP endpoints only; 0: left to TCP.
  std::chrono::milliseconds dead_peer_timeout{10'000};
};

class client {
 public:
  // endpoint::parse: "http://HOST:PORT" or "unix:///PATH".
  static io::result<endpoint> parse_endpoint(std::string_view text) { return endpoint::parse(text); }

  explicit client(endpoint where, client_options options = {});
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  ~client();  // closes the idle connection synchronously

  const endpoint& where() const noexcept { return where_; }
  const client_options& options() const noexcept { return options_; }

  // The revision of the put.
  runtime::task<io::result<std::int64_t>> put(std::string key, std::string value, std::int64_t lease = 0);
  runtime::task<io::result<range_response>> get(std::string key, range_options options = {});
  // Keys starting with `prefix` ("" is every key), in key order.
  runtime::task<io::result<range_response>> get_prefix(std::string prefix, range_options options = {});
  // How many keys were deleted.
  runtime::task<io::result<std::int64_t>> del(std::string key);
  runtime::task<io::result<std::int64_t>> del_prefix(std::string prefix);
  runtime::task<io::result<txn_response>> txn(std::vector<compare> compares, std::vector<op> success,
                                              std::vector<op> failure = {});

  runtime::task<io::result<lease>> lease_grant(std::int64_t ttl_seconds);
  // Renews once; the remaining TTL. A lease that is gone (expired, revoked, unknown) fails with
  // errc::lease_expired.
  runtime::task<io::result<std::int64_t>> lease_keepalive(std::int64_t id);
  runtime::task<io::result<void>> lease_revoke(std::int64_t id);
  runtime::task<io::result<lease_ttl>> lease_time_to_live(std::int64_t id);

  // A watch of `key` (or of every key under `prefix`), from `start_revision` (0: from now on).
  runtime::task<io::result<etcd::watch>> watch(std::string key, std::int64_t start_revision = 0);
  runtime::task<io::result<etcd::watch>> watch_prefix(std::string prefix, std::int64_t start_revision = 0);

  // Compacts the history up to `revision`; `physical` waits until it is removed from the backend.
  runtime::task<io::result<void>> compact(std::int64_t revision, bool physical = false);
  // The answering member's status: a health check (it answered, and `leader` is nonzero when the
  // cluster has a leader).
  runtime::task<io::result<status_response>> status();

 private:
  struct unary_request;
  runtime::task<io::result<std::string>> unary(const char* call, const char* path, std::string body, bool read_only);
  runtime::task<io::result<std::string>> exchange(const unary_request* request);
  runtime::task<io::result<etcd::watch>> open_watch(std::string key, std::string range_end, std::int64_t start_revision);
  void check_home();
  io::error fail(const char* call, const io::error& cause) const;

  endpoint where_;
  client_options options_;
  runtime::executor* home_ = nullptr;
  runtime::semaphore turn_{1};                     // one unary call at a time on the connection
  std::unique_ptr<detail::http_connection> idle_;  // the kept-alive connection, between calls
};

}  // namespace sluice::etcd
