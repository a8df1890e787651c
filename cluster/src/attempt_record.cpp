// See attempt_record.hpp.

#include "attempt_record.hpp"

#include <nlohmann/json.hpp>

#include <chrono>

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

std::string encode_acknowledgement(const snapshot::task_checkpoint_stats& stats) {
  json j{{"op", stats.operator_state_bytes},
         {"ch", stats.channel_state_bytes},
         {"align_ns", stats.alignment_duration.count()},
         {"sync_ns", stats.sync_duration.count()},
         {"write_ns", stats.write_duration.count()},
         {"fsync_ns", stats.fsync_duration.count()},
         {"unaligned", stats.switched_to_unaligned}};
  if (stats.state_file) {
    j["file"] = json{{"size", stats.state_file->size_bytes},
                     {"crc", stats.state_file->crc32c},
                     {"op", stats.state_file->operator_state_bytes},
                     {"ch", stats.state_file->channel_state_bytes}};
    if (!stats.state_file->bases.empty()) j["file"]["bases"] = stats.state_file->bases;
  }
  return j.dump();
}

std::optional<snapshot::task_checkpoint_stats> decode_acknowledgement(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    snapshot::task_checkpoint_stats stats;
    stats.operator_state_bytes = j.value("op", std::uint64_t{0});
    stats.channel_state_bytes = j.value("ch", std::uint64_t{0});
    stats.alignment_duration = std::chrono::nanoseconds(j.value("align_ns", std::int64_t{0}));
    stats.sync_duration = std::chrono::nanoseconds(j.value("sync_ns", std::int64_t{0}));
    stats.write_duration = std::chrono::nanoseconds(j.value("write_ns", std::int64_t{0}));
    stats.fsync_duration = std::chrono::nanoseconds(j.value("fsync_ns", std::int64_t{0}));
    stats.switched_to_unaligned = j.value("unaligned", false);
    if (j.contains("file")) {
      const json& f = j.at("file");
      if (!f.is_object()) return std::nullopt;
      snapshot::manifest_file file;
      file.size_bytes = f.value("size", std::uint64_t{0});
      file.crc32c = f.value("crc", std::uint32_t{0});
      file.operator_state_bytes = f.value("op", std::uint64_t{0});
      file.channel_state_bytes = f.value("ch", std::uint64_t{0});
      if (f.contains("bases")) {
        const json& bases = f.at("bases");
        if (!bases.is_array()) return std::nullopt;
        for (const json& base : bases) {
          if (!base.is_number_unsigned()) return std::nullopt;  // (get<> would wrap a negative id)
          file.bases.push_back(base.get<snapshot::checkpoint_id>());
        }
      }
      stats.state_file = std::move(file);
    }
    return stats;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace sluice::cluster::detail
