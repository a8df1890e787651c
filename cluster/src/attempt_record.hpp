#pragma once
// attempt_record: what the leader writes to `<prefix>attempt` to start an attempt, what a member
// writes to `<prefix>member/<i>`, and what the leader writes to `<prefix>finished`, as JSON
// (nlohmann-json).

#include <sluice/io/result.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cluster::detail {

struct attempt_record {
  std::uint64_t number = 0;
  std::int64_t epoch = 0;  // the leader key's create revision
  unsigned leader = 0;
  std::vector<std::string> ports;                 // every worker's advertised data port, by index
  std::vector<std::int64_t> member_revisions;     // every worker's member key create revision
  snapshot::checkpoint_id newest_allowed = 0;     // recovery goes no further
  snapshot::checkpoint_id first_free_id = 1;

  std::string encode() const;
  static std::optional<attempt_record> decode(std::string_view text);
};

struct member_record {
  std::string port;         // advertised data port, HOST:PORT
  long pid = 0;
  std::string fingerprint;  // dataflow::encode_fingerprint of its job
  std::string encode() const;
  static std::optional<member_record> decode(std::string_view text);
};

// `<prefix>finished`: the job ended on every worker of attempt `attempt`, its final checkpoint
// `checkpoint`, with the job whose fingerprint is `fingerprint`.
struct finished_record {
  std::uint64_t attempt = 0;
  snapshot::checkpoint_id checkpoint = 0;
  std::string fingerprint;
  std::string encode() const;
  static std::optional<finished_record> decode(std::string_view text);
};

}  // namespace sluice::cluster::detail
