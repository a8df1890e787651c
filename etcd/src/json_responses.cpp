// Reading the etcd gateway's responses (see json.hpp).

#include "json.hpp"

#include <charconv>

namespace sluice::etcd::detail {

namespace {

// The field, or null when absent.
const json* field(const json& object, const char* name) {
  if (!object.is_object()) throw shape_error("expected an object around '" + std::string(name) + "'");
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

template <class Int>
Int integer(const json& object, const char* name) {
  const json* v = field(object, name);
  if (v == nullptr) return 0;
  if (v->is_number_integer()) return v->get<Int>();
  if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    Int out = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return out;
  }
  throw shape_error("field '" + std::string(name) + "' is not an integer: " + excerpt(v->dump()));
}

std::int64_t int64(const json& object, const char* name) { return integer<std::int64_t>(object, name); }
std::uint64_t uint64(const json& object, const char* name) { return integer<std::uint64_t>(object, name); }

bool boolean(const json& object, const char* name) {
  const json* v = field(object, name);
  if (v == nullptr) return false;
  if (!v->is_boolean()) throw shape_error("field '" + std::string(name) + "' is not a boolean");
  return v->get<bool>();
}

std::string text(const json& object, const char* name) {
  const json* v = field(object, name);
  if (v == nullptr) return {};
  if (!v->is_string()) throw shape_error("field '" + std::string(name) + "' is not a string");
  return v->get<std::string>();
}

std::string bytes(const json& object, const char* name) { return base64_decode(text(object, name)); }

// The field `name` if it is of `kind` (json::is_array, is_object), `empty` if it is missing.
const json& of_kind_or(const json& object, const char* name, bool (json::*kind)() const noexcept, const json& empty,
                       const char* kind_name) {
  const json* v = field(object, name);
  if (v == nullptr) return empty;
  if (!((*v).*kind)()) throw shape_error("field '" + std::string(name) + "' is not " + kind_name);
  return *v;
}

const json& array_or_empty(const json& object, const char* name) {
  static const json empty = json::array();
  return of_kind_or(object, name, &json::is_array, empty, "an array");
}

const json& object_or_empty(const json& object, const char* name) {
  static const json empty = json::object();
  return of_kind_or(object, name, &json::is_object, empty, "an object");
}

key_value to_kv(const json& j) {
  key_value kv;
  kv.key = bytes(j, "key");
  kv.value = bytes(j, "value");
  kv.create_revision = int64(j, "create_revision");
  kv.mod_revision = int64(j, "mod_revision");
  kv.version = int64(j, "version");
  kv.lease = int64(j, "lease");
  return kv;
}

std::vector<key_value> to_kvs(const json& response) {
  std::vector<key_value> kvs;
  for (const json& kv : array_or_empty(response, "kvs")) kvs.push_back(to_kv(kv));
  return kvs;
}

watch_event to_event(const json& j) {
  watch_event e;
  const json* type = field(j, "type");
  if (type != nullptr && !((type->is_string() && *type == "PUT") || (type->is_number_integer() && *type == 0))) {
    if ((type->is_string() && *type == "DELETE") || (type->is_number_integer() && *type == 1)) {
      e.type = watch_event::kind::del;
    } else {
      throw shape_error("unknown event type " + excerpt(type->dump()));
    }
  }
  e.kv = to_kv(object_or_empty(j, "kv"));
  return e;
}

}  // namespace

std::string excerpt(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && out.size() < 120; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      out.append("\\x").push_back(hex[c >> 4]);
      out.push_back(hex[c & 0xf]);
    }
  }
  if (out.size() >= 120) out.append("...");
  return out;
}

std::int64_t header_revision(const json& response) { return int64(object_or_empty(response, "header"), "revision"); }

range_response to_range(const json& response) {
  range_response r;
  r.revision = header_revision(response);
  r.kvs = to_kvs(response);
  r.count = int64(response, "count");
  r.more = boolean(response, "more");
  return r;
}

std::int64_t to_deleted(const json& response) { return int64(response, "deleted"); }

txn_response to_txn(const json& response) {
  txn_response t;
  t.succeeded = boolean(response, "succeeded");
  t.revision = header_revision(response);
  for (const json& r : array_or_empty(response, "responses")) {
    if (!r.is_object()) throw shape_error("a txn response that is not an object");
    const json& range = object_or_empty(r, "response_range");
    t.ranges.push_back(to_kvs(range));
    t.deleted.push_back(to_deleted(object_or_empty(r, "response_delete_range")));
  }
  return t;
}

lease to_lease(const json& response) {
  if (const std::string e = text(response, "error"); !e.empty()) throw shape_error("lease grant refused: " + e);
  return lease{int64(response, "ID"), int64(response, "TTL")};
}

std::int64_t to_keepalive_ttl(const json& message) { return int64(object_or_empty(message, "result"), "TTL"); }

lease_ttl to_lease_ttl(const json& response) { return lease_ttl{int64(response, "TTL"), int64(response, "grantedTTL")}; }

status_response to_status(const json& response) {
  status_response s;
  s.version = text(response, "version");
  const json& header = object_or_empty(response, "header");
  s.member_id = uint64(header, "member_id");
  s.revision = int64(header, "revision");
  s.leader = uint64(response, "leader");
  s.raft_term = uint64(response, "raftTerm");
  s.raft_index = uint64(response, "raftIndex");
  s.db_size_bytes = int64(response, "dbSize");
  for (const json& e : array_or_empty(response, "errors")) {
    if (!e.is_string()) throw shape_error("a status error that is not a string");
    s.errors.push_back(e.get<std::string>());
  }
  return s;
}

watch_message to_watch_message(const json& result) {
  watch_message m;
  m.created = boolean(result, "created");
  m.canceled = boolean(result, "canceled");
  m.watch_id = int64(result, "watch_id");
  m.revision = header_revision(result);
  m.compact_revision = int64(result, "compact_revision");
  m.cancel_reason = text(result, "cancel_reason");
  for (const json& e : array_or_empty(result, "events")) m.events.push_back(to_event(e));
  return m;
}

std::optional<gateway_error> to_gateway_error(const json& body) {
  if (!body.is_object()) return std::nullopt;
  const auto it = body.find("error");
  if (it == body.end()) return std::nullopt;
  gateway_error e;
  const json& source = it->is_object() ? *it : body;  // a stream's error is an object
  const char* code_name = it->is_object() ? "grpc_code" : "code";
  if (const auto code = source.find(code_name); code != source.end() && code->is_number_integer()) {
    e.code = code->get<int>();
  }
  if (const auto m = source.find("message"); m != source.end() && m->is_string()) e.message = m->get<std::string>();
  if (e.message.empty() && it->is_string()) e.message = it->get<std::string>();
  if (e.message.empty()) e.message = excerpt(body.dump());
  return e;
}

}  // namespace sluice::etcd::detail
