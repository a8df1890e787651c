#pragma once
// The etcd gateway's JSON, both ways (private to the etcd module).
//
// The gateway is grpc-gateway over etcd's protobufs, marshalled with the original field names:
// bytes are standard base64 (with padding), int64/uint64 are JSON strings, enums are their names
// ("VERSION", "EQUAL", "DELETE"), and fields at their zero value are left out. Requests are built
// with int64s as strings too. Reading is strict about shapes (a kv that is not an object, a
// revision that is not an integer, bad base64 are errors) and lenient about absence (0 / empty).
//
// Response readers throw shape_error or nlohmann::json::exception; decode() turns either into an
// errc::bad_response io::error. Nothing here does I/O.

#include <sluice/etcd/errors.hpp>
#include <sluice/etcd/types.hpp>
#include <sluice/io/result.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::etcd::detail {

using json = nlohmann::json;

struct shape_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Standard base64 with padding (OpenSSL's EVP_EncodeBlock / EVP_DecodeBlock). decode throws
// shape_error on a length that is not a multiple of 4, a character outside the alphabet, or
// padding anywhere but at the end.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);

// [key, range_end) of every key starting with `prefix`; "" gives every key ("\0", "\0").
std::pair<std::string, std::string> prefix_range(std::string_view prefix);

// --- requests ----------------------------------------------------------------------------------

std::string put_body(std::string_view key, std::string_view value, std::int64_t lease);
std::string range_body(std::string_view key, std::string_view range_end, const range_options& options);
std::string delete_body(std::string_view key, std::string_view range_end);
std::string txn_body(const std::vector<compare>& compares, const std::vector<op>& success, const std::vector<op>& failure);
std::string lease_grant_body(std::int64_t ttl_seconds);
std::string lease_id_body(std::int64_t id);  // keepalive, revoke, time-to-live
std::string compact_body(std::int64_t revision, bool physical);
std::string watch_create_body(std::string_view key, std::string_view range_end, std::int64_t start_revision);

// --- responses ---------------------------------------------------------------------------------

std::int64_t header_revision(const json& response);
range_response to_range(const json& response);
std::int64_t to_deleted(const json& response);
txn_response to_txn(const json& response);
lease to_lease(const json& response);
// A keepalive stream's first message's "result"; its TTL (0 or absent: the lease is gone).
std::int64_t to_keepalive_ttl(const json& message);
lease_ttl to_lease_ttl(const json& response);
status_response to_status(const json& response);

// One message of a watch stream: the "result" object.
struct watch_message {
  bool created = false;
  bool canceled = false;
  std::int64_t watch_id = 0;
  std::int64_t revision = 0;
  std::int64_t compact_revision = 0;
  std::string cancel_reason;
  std::vector<watch_event> events;
};
watch_message to_watch_message(const json& result);

// A gateway error body: {"error": "...", "code": N, "message": "..."} for a unary call, or
// {"error": {"grpc_code": N, "message": "...", ...}} inside a stream. nullopt for anything else.
struct gateway_error {
  int code = 2;  // gRPC UNKNOWN when absent
  std::string message;
};
std::optional<gateway_error> to_gateway_error(const json& body);

// The first bytes of `text`, printable, for a message about junk.
std::string excerpt(std::string_view text);

// Parses `body` as JSON and applies `read`; a parse or shape failure is errc::bad_response.
template <class F>
auto decode(std::string_view body, F read) -> io::result<std::invoke_result_t<F, const json&>> {
  using T = std::invoke_result_t<F, const json&>;
  std::string why;
  try {
    const json parsed = json::parse(body.begin(), body.end());
    if (!parsed.is_object()) throw shape_error("not a JSON object");
    if constexpr (std::is_void_v<T>) {
      read(parsed);
      return io::success();
    } else {
      return read(parsed);
    }
  } catch (const json::exception& e) {
    why = e.what();
  } catch (const shape_error& e) {
    why = e.what();
  }
  return io::error(make_error_code(errc::bad_response), "bad response '" + excerpt(body) + "': " + why);
}

}  // namespace sluice::etcd::detail
