// Request bodies for the etcd gateway, and the base64 they carry (see json.hpp).

#include "json.hpp"

#include <openssl/evp.h>

#include <climits>
#include <cstring>

namespace sluice::etcd::detail {

namespace {

const unsigned char* bytes(std::string_view s) noexcept { return reinterpret_cast<const unsigned char*>(s.data()); }

bool in_alphabet(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

std::string number(std::int64_t v) { return std::to_string(v); }

const char* target_name(compare::target t) noexcept {
  switch (t) {
    case compare::target::version: return "VERSION";
    case compare::target::create: return "CREATE";
    case compare::target::mod: return "MOD";
    case compare::target::value: return "VALUE";
    case compare::target::lease: return "LEASE";
  }
  return "VERSION";
}

const char* result_name(compare::result r) noexcept {
  switch (r) {
    case compare::result::equal: return "EQUAL";
    case compare::result::greater: return "GREATER";
    case compare::result::less: return "LESS";
    case compare::result::not_equal: return "NOT_EQUAL";
  }
  return "EQUAL";
}

json key_range(std::string_view key, std::string_view range_end) {
  json j = {{"key", base64_encode(key)}};
  if (!range_end.empty()) j["range_end"] = base64_encode(range_end);
  return j;
}

json compare_json(const compare& c) {
  json j = {{"key", base64_encode(c.key)}, {"target", target_name(c.what)}, {"result", result_name(c.how)}};
  switch (c.what) {
    case compare::target::version: j["version"] = number(c.number); break;
    case compare::target::create: j["create_revision"] = number(c.number); break;
    case compare::target::mod: j["mod_revision"] = number(c.number); break;
    case compare::target::value: j["value"] = base64_encode(c.value); break;
    case compare::target::lease: j["lease"] = number(c.number); break;
  }
  return j;
}

json op_json(const op& o) {
  switch (o.what) {
    case op::kind::put: {
      json put = {{"key", base64_encode(o.key)}, {"value", base64_encode(o.value)}};
      if (o.lease != 0) put["lease"] = number(o.lease);
      return {{"request_put", std::move(put)}};
    }
    case op::kind::range: return {{"request_range", key_range(o.key, o.range_end)}};
    case op::kind::del: return {{"request_delete_range", key_range(o.key, o.range_end)}};
  }
  return json::object();
}

json op_list(const std::vector<op>& ops) {
  json list = json::array();
  for (const op& o : ops) list.push_back(op_json(o));
  return list;
}

}  // namespace

std::string base64_encode(std::string_view in) {
  if (in.size() > static_cast<std::size_t>(INT_MAX / 4 * 3)) throw shape_error("value too large for base64");
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');  // + EVP_EncodeBlock's NUL
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes(in), static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string base64_decode(std::string_view text) {
  if (text.empty()) return {};
  if (text.size() % 4 != 0 || text.size() > static_cast<std::size_t>(INT_MAX)) {
    throw shape_error("bad base64 (length " + std::to_string(text.size()) + " is not a multiple of 4)");
  }
  // EVP_DecodeBlock skips surrounding whitespace and treats '=' loosely: check the text first.
  std::size_t padding = 0;
  if (text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  for (std::size_t i = 0; i < text.size() - padding; ++i) {
    if (!in_alphabet(text[i])) throw shape_error("bad base64 (character " + std::to_string(i) + ")");
  }
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes(text), static_cast<int>(text.size()));
  if (n != static_cast<int>(out.size())) throw shape_error("bad base64");
  out.resize(out.size() - padding);  // EVP_DecodeBlock counts the padding as zero bytes
  return out;
}

std::pair<std::string, std::string> prefix_range(std::string_view prefix) {
  if (prefix.empty()) return {std::string(1, '\0'), std::string(1, '\0')};
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) != 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return {std::string(prefix), std::move(end)};
    }
    end.pop_back();  // "a\xff" ends at "b"
  }
  return {std::string(prefix), std::string(1, '\0')};  // all 0xff: every key from the prefix on
}

std::string put_body(std::string_view key, std::string_view value, std::int64_t lease) {
  json j = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) j["lease"] = number(lease);
  return j.dump();
}

std::string range_body(std::string_view key, std::string_view range_end, const range_options& options) {
  json j = key_range(key, range_end);
  if (options.limit != 0) j["limit"] = number(options.limit);
  if (options.revision != 0) j["revision"] = number(options.revision);
  if (options.count_only) j["count_only"] = true;
  if (options.keys_only) j["keys_only"] = true;
  return j.dump();
}

std::string delete_body(std::string_view key, std::string_view range_end) { return key_range(key, range_end).dump(); }

std::string txn_body(const std::vector<compare>& compares, const std::vector<op>& success, const std::vector<op>& failure) {
  json list = json::array();
  for (const compare& c : compares) list.push_back(compare_json(c));
  return json{{"compare", std::move(list)}, {"success", op_list(success)}, {"failure", op_list(failure)}}.dump();
}

std::string lease_grant_body(std::int64_t ttl_seconds) { return json{{"TTL", number(ttl_seconds)}}.dump(); }

std::string lease_id_body(std::int64_t id) { return json{{"ID", number(id)}}.dump(); }

std::string compact_body(std::int64_t revision, bool physical) {
  return json{{"revision", number(revision)}, {"physical", physical}}.dump();
}

std::string watch_create_body(std::string_view key, std::string_view range_end, std::int64_t start_revision) {
  json create = key_range(key, range_end);
  if (start_revision != 0) create["start_revision"] = number(start_revision);
  return json{{"create_request", std::move(create)}}.dump();
}

}  // namespace sluice::etcd::detail
