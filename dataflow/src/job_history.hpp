#pragma once
// job_history: the job's side of the checkpoint history file (snapshot/checkpoint_history.hpp):
// appends one line per start and per checkpoint end to <checkpoint_dir>/history.jsonl.
//
// Protocol. Only the coordinating side (run_job, or a cluster job's leader) keeps one, on executor
// 0. job_started() and checkpoint_ended() only queue the line (they never block nor await); one
// writer coroutine at a time takes the queue in order, through the runtime's file I/O:
//   1. first write: open the file (created if absent), count its lines and note whether its last
//      line is complete (a crash mid-append leaves it torn: the next line then starts with '\n',
//      so the torn one stays a line of its own that readers skip);
//   2. each line: one write at the end; not fsynced (diagnostics only, see checkpoint_history.hpp);
//   3. past 2N lines: the newest N complete lines go to history.jsonl.tmp (written, fsynced: a crash
//      must not leave an empty history), renamed over the file; writing continues there.
// A failure (a full disk, an unwritable directory) is logged once, the line dropped and the file
// closed; the next line tries again. Nothing here can fail the job. At most max_queued_lines wait
// (a stalled disk): beyond, lines are dropped (logged once).

#include <sluice/io/file.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint_history.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace sluice::dataflow {
class job_builder;
class job_plan;
}  // namespace sluice::dataflow

namespace sluice::dataflow::detail {

// Each task's name by id, "<stage>#<subtask>" (as the tasks name themselves in log lines).
std::vector<std::string> task_names(const job_builder& job, const job_plan& plan);

// The whole history file at `path`, through the runtime's file I/O: empty if absent, not a regular
// file, or beyond 256 MiB (a stray huge file must not fill memory); parse it with
// snapshot::parse_history. What job_history compacts from, and what the status page reads.
runtime::task<io::result<std::string>> read_history_text(std::string path);

class job_history {
 public:
  static constexpr std::size_t max_queued_lines = 1024;

  // `max_entries` (N >= 1) lines kept after a compaction; `task_names[id]` names task `id`.
  job_history(std::string checkpoint_dir, std::size_t max_entries, std::vector<std::string> task_names);
  job_history(const job_history&) = delete;
  job_history& operator=(const job_history&) = delete;
  ~job_history();

  // On executor 0, as the job restored (or started afresh) and as each checkpoint ends.
  void job_started(std::string job, std::optional<snapshot::checkpoint_id> resumed_from,
                   std::chrono::nanoseconds restore_duration);
  void checkpoint_ended(const snapshot::checkpoint_stats& stats);
  // Writes what is queued, then closes the file. Before destruction.
  runtime::task<void> close();

  const std::string& path() const noexcept { return path_; }

 private:
  void enqueue(std::string line);
  runtime::task<void> pump();
  runtime::task<io::result<void>> open();
  runtime::task<io::result<void>> append(std::string line);
  runtime::task<io::result<void>> compact();
  runtime::task<void> drop_file();
  void failed(const io::error& e);

  std::string path_;
  std::string temp_path_;
  std::size_t max_entries_;
  std::vector<std::string> task_names_;
  std::deque<std::string> queue_;
  io::file file_;
  std::uint64_t size_bytes_ = 0;  // of the open file
  std::size_t lines_ = 0;         // in the open file (complete or not)
  bool needs_newline_ = false;    // the file's last line is torn
  bool pumping_ = false;
  bool warned_ = false;
  bool warned_queue_ = false;
  runtime::scope scope_;
};

}  // namespace sluice::dataflow::detail
