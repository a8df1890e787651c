#pragma once
// attempt_record: what the leader writes to `<prefix>attempt` to start an attempt, what a member
// writes to `<prefix>member/<i>`, and what the leader writes to `<prefix>finished`, as JSON
// (nlohmann-json); and a task's acknowledgement of a checkpoint, which a follower sends the leader
// (attempt_link.hpp, k/<id>/<task>).

#include <sluice/io/result.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>

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

// A task's checkpoint stats as the leader receives them: {"op", "ch", "align_ns", "sync_ns",
// "write_ns", "fsync_ns", "unaligned", and "file": {"size", "crc", "op", "ch", "bases"} when the
// writer described its state file}. "bases" (the checkpoints the file's operator state is a delta
// on, so the leader's manifest requires them) is there only when there are some. snapshot_started_at
// is not sent: it is this host's steady clock, meaningless on the leader's. A missing field decodes
// as 0 (none); anything that is not such an object, or a field of the wrong type, as nothing.
std::string encode_acknowledgement(const snapshot::task_checkpoint_stats& stats);
std::optional<snapshot::task_checkpoint_stats> decode_acknowledgement(std::string_view text);

}  // namespace sluice::cluster::detail
