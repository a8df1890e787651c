#pragma once
// checkpoint_history: the checkpoint directory's history file, `history.jsonl`, kept across
// restarts: one JSON object per line, per event (a checkpoint ended; the job started, resumed from
// a checkpoint or not). The job appends to it (dataflow's job_history, on executor 0); the status
// page and `sluice checkpoints DIR` read it, both through this reader.
//
// It is diagnostics, not part of exactly-once: lines are appended without an fsync each, because
// nothing relies on them surviving a crash, and an fsync per checkpoint end would add a disk flush
// to the coordinator's path for nothing. Hence a crash may lose the newest lines or cut the last one
// short: the reader skips a line that does not decode (torn, garbage), never failing, and counts
// it. Retention and recovery ignore the file (they only look at chk-<id> entries).
//
// Format, version 1 (fields absent from a line read as zero or empty):
//   {"v":1,"event":"checkpoint","id":7,"mode":"aligned","triggered_unix_ms":1700000000000,
//    "duration_ns":..,"max_alignment_ns":..,"max_sync_ns":..,"operator_state_bytes":..,"channel_state_bytes":..,
//    "tasks":4,"acknowledged":4,"outcome":"completed"        (or "aborted","reason":"expired","detail":"..")
//    "task_breakdown":[{"task":0,"name":"read#0","start_delay_ns":..  (absent: unknown, a remote task)
//                       "alignment_ns":..,"sync_ns":..,"write_ns":..,"fsync_ns":..,"operator_state_bytes":..,
//                       "channel_state_bytes":..,"switched_to_unaligned":false}, ...]}
//   {"v":1,"event":"start","unix_ms":..,"job":"wordcount","resumed_from":7 (or null),"restore_ns":..}
//
// The file is bounded by its writer: past 2N lines it is rewritten with the newest N (a temporary
// file renamed over it), so a reader sees between N and 2N events of a long-running job.

#include <sluice/io/result.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice::snapshot {

inline constexpr std::string_view history_file_name = "history.jsonl";
inline constexpr std::string_view history_temp_file_name = "history.jsonl.tmp";
inline constexpr int history_format_version = 1;

struct history_task {
  task_id task = 0;
  std::string name;                                   // "count#1"; empty if unknown
  std::optional<std::chrono::nanoseconds> start_delay;  // empty: unknown (task_checkpoint_breakdown)
  std::chrono::nanoseconds alignment_duration{0};
  std::chrono::nanoseconds sync_duration{0};
  std::chrono::nanoseconds write_duration{0};
  std::chrono::nanoseconds fsync_duration{0};
  std::uint64_t operator_state_bytes = 0;
  std::uint64_t channel_state_bytes = 0;
  bool switched_to_unaligned = false;
};

struct history_checkpoint {
  checkpoint_id id = no_checkpoint;
  checkpoint_mode mode = checkpoint_mode::aligned;
  std::uint64_t triggered_unix_ms = 0;
  std::chrono::nanoseconds duration{0};
  std::chrono::nanoseconds max_alignment_duration{0};
  std::chrono::nanoseconds max_sync_duration{0};
  std::uint64_t operator_state_bytes = 0;
  std::uint64_t channel_state_bytes = 0;
  std::size_t tasks = 0;
  std::size_t acknowledged = 0;
  bool completed = false;
  std::string reason;  // when aborted: to_string(abort_reason)
  std::string detail;  // when aborted
  std::vector<history_task> task_breakdown;
  // Whether it started aligned and switched to unaligned (aligned_timeout), at some task.
  bool switched_to_unaligned() const noexcept;
};

struct history_start {
  std::uint64_t unix_ms = 0;
  std::string job;
  std::optional<checkpoint_id> resumed_from;  // empty: a fresh start
  std::chrono::nanoseconds restore_duration{0};  // start of the run to every task restored
};

using history_event = std::variant<history_checkpoint, history_start>;

// A checkpoint's stats as the history records them; `task_names[id]` names task `id` (if given).
history_checkpoint history_of(const checkpoint_stats& stats, const std::vector<std::string>& task_names);

// One line, ending in '\n'.
std::string encode_history_line(const history_event& event);
// nullopt: not a line of this format (torn, garbage, another version's event kind).
std::optional<history_event> decode_history_line(std::string_view line);

struct history_contents {
  std::vector<history_event> events;  // oldest first
  std::size_t skipped_lines = 0;      // did not decode, or the last one lacked its '\n' (torn)
};
// Every line of `text`; a last line without its newline is torn (cut by a crash mid-append).
history_contents parse_history(std::string_view text);

// Reads `checkpoint_dir`/history.jsonl with blocking calls: for tools (the CLI), never on a job's
// executor. An error (ENOENT: no history yet) names the file.
io::result<history_contents> read_history_blocking(const std::string& checkpoint_dir);

struct history_summary {
  std::size_t completed = 0;
  std::size_t aborted = 0;
  std::map<std::string, std::size_t> aborted_by_reason;
  std::size_t switched_to_unaligned = 0;  // checkpoints
  std::size_t starts = 0;
  std::size_t restores = 0;  // starts that resumed from a checkpoint
  const history_checkpoint* last_completed = nullptr;  // points into the events summarized
};
history_summary summarize(const std::vector<history_event>& events);

}  // namespace sluice::snapshot
