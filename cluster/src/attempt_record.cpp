// See attempt_record.hpp.

#include "attempt_record.hpp"

#include <nlohmann/json.hpp>

namespace sluice::cluster::detail {

using json = nlohmann::json;

std::string attempt_record::encode() const {
  return json{{"number", number},   {"epoch", epoch},
              {"leader", leader},   {"ports", ports},
              {"members", member_revisions}, {"newest_allowed", newest_allowed},
              {"first_free_id", first_free_id}}
      .dump();
}

std::optional<attempt_record> attempt_record::decode(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    attempt_record r;
    r.number = j.at("number").get<std::uint64_t>();
    r.epoch = j.at("epoch").get<std::int64_t>();
    r.leader = j.at("leader").get<unsigned>();
    r.ports = j.at("ports").get<std::vector<std::string>>();
    r.member_revisions = j.at("members").get<std::vector<std::int64_t>>();
    r.newest_allowed = j.at("newest_allowed").get<snapshot::checkpoint_id>();
    r.first_free_id = j.at("first_free_id").get<snapshot::checkpoint_id>();
    if (r.ports.size() != r.member_revisions.size() || r.leader >= r.ports.size()) return std::nullopt;
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string member_record::encode() const { return json{{"port", port}, {"pid", pid}, {"fingerprint", fingerprint}}.dump(); }

std::optional<member_record> member_record::decode(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    member_record r;
    r.port = j.at("port").get<std::string>();
    r.pid = j.at("pid").get<long>();
    r.fingerprint = j.at("fingerprint").get<std::string>();
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::string finished_record::encode() const {
  return json{{"attempt", attempt}, {"checkpoint", checkpoint}, {"fingerprint", fingerprint}}.dump();
}

std::optional<finished_record> finished_record::decode(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    finished_record r;
    r.attempt = j.at("attempt").get<std::uint64_t>();
    r.checkpoint = j.at("checkpoint").get<snapshot::checkpoint_id>();
    r.fingerprint = j.at("fingerprint").get<std::string>();
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace sluice::cluster::detail
