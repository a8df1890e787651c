#pragma once
// The error codes an etcd client's io::error may carry, besides errno values (a transport failure,
// e.g. ENOENT for a missing socket, ECONNREFUSED, ECONNRESET) and std::errc::timed_out (a request
// that ran past client_options::request_timeout).
//
// - etcd::errc: what the client itself concluded (a lease that is gone, a compacted watch, a
//   response it refused).
// - etcd::grpc_code: the gRPC status the gateway reported for a failed request, with the server's
//   own text in the message ("etcdserver: requested lease not found (gRPC NOT_FOUND)").
//
//   if (r.error().code() == etcd::errc::lease_expired) campaign_again();

#include <system_error>
#include <type_traits>

namespace sluice::etcd {

enum class errc {
  lease_expired = 1,       // keepalive: the lease expired, was revoked, or never existed
  compacted = 2,           // watch: its start revision is compacted away (watch::compact_revision())
  bad_response = 3,        // not HTTP/1.1, truncated, not JSON, or JSON of the wrong shape
  response_too_large = 4,  // more than client_options::max_response_bytes
  watch_ended = 5,         // the server cancelled a watch, its stream ended, or it was closed
};
const std::error_category& etcd_category() noexcept;
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), etcd_category()}; }

// gRPC status codes (grpc/status.h), as the gateway's "code" field carries them.
enum class grpc_code {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,  // e.g. "etcdserver: mvcc: required revision has been compacted"
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};
const std::error_category& grpc_category() noexcept;
inline std::error_code make_error_code(grpc_code c) noexcept { return {static_cast<int>(c), grpc_category()}; }
// "NOT_FOUND"; "(unknown code)" for a value outside the table.
const char* grpc_code_name(int code) noexcept;

}  // namespace sluice::etcd

template <>
struct std::is_error_code_enum<sluice::etcd::errc> : std::true_type {};
template <>
struct std::is_error_code_enum<sluice::etcd::grpc_code> : std::true_type {};
