#pragma once
// exactly_once_file_sink: a two-phase (stage, then publish) line sink into a directory, one instance
// per sink task. Output becomes visible only when the checkpoint that covers it completes, so after
// any crash the published files hold every record exactly once (invariant 8).
//
// Layout: published files `<dir>/part-<task>-<seq>`; everything else in the sink's private staging
// area `<dir>/.sluice-staging/`: staged files `staged-<task>-<seq>`, and per task one empty file
// `next-<task>-<n>`, its HIGH-WATER MARK: the task never staged a sequence number >= n into this
// directory. It is raised past a staged file when that file is created (and the area fsynced then),
// so every file the task ever published has a sequence number below the mark on disk.
//
// Protocol, driven by the sink task on its executor, one call at a time:
// 1. recover(state) once, before any write: `state` is what snapshot() returned for the checkpoint
//    the job resumes from (empty: fresh start). It publishes the files that checkpoint covered and
//    deletes this task's output from after it, which the replay produces again. It deletes only
//    files it can prove it wrote: staged files (in its private area), and published files whose
//    sequence number is >= the state's next one (a newer checkpoint that was not resumed published
//    them) and below the high-water mark. A file named like its output that it cannot prove it wrote
//    (`part-<task>-<seq>` at or above the mark: a replay would overwrite it) fails recover() naming
//    the file, and nothing is changed. It lists the directory and the area once, at start-up, with
//    readdir on the executor's blocking-work pool (io_uring has no getdents; runtime/offload.hpp).
// 2. write(line): appends line + '\n' to the staged file `.sluice-staging/staged-<task>-<seq>`,
//    through a 256 KiB buffer and io_uring writes. The first write after a snapshot creates the
//    file, raises the high-water mark past it and fsyncs the area: both entries are durable before
//    any of its bytes can be published, and off the checkpoint's path.
// 3. snapshot(id) at barrier `id`: flushes, fsyncs and closes the staged file, records it as
//    pending for `id`, and returns the state to store as this operator's state in checkpoint `id`.
//    (One fsync: a barrier waits for this call, so it holds no more durable steps than the bytes'.)
// 4. commit(id) when checkpoint `id` completed: renames every pending file of a checkpoint <= id
//    to `<dir>/part-<task>-<seq>` and fsyncs the directory. Idempotent.
//    abort(id): nothing to undo. Its files stay pending and are published by the next completed
//    checkpoint (data before barrier N is also before barrier N+1).
// 5. close(): closes an open staged file without publishing it. To publish the tail of a bounded
//    input, take a last checkpoint (snapshot + commit) before close().
//
// Whose directory it is (a marker file, a lock) is decided by the job before any sink starts
// (job_runner.hpp); the sink itself only keeps to the files it can prove are its own.
//
// Final names never start with '.' or '_' (readers skip hidden files); sequence numbers are zero-
// padded so a task's files sort by name in output order. A published file is never modified.
//
// A failed write, flush or fsync leaves the sink FAILED: after EIO the kernel may have dropped the
// staged pages, and a later fsync could succeed without them, so every later write() and snapshot()
// fails too (naming the first error) and no checkpoint can cover lost output. The task must fail and
// recover from the last completed checkpoint. A failed commit() only delays publication: its files
// stay pending and the next commit() retries them.
//
// State (little-endian, version 1): u32 version, u32 task id, u64 next sequence number,
// u32 pending count, then per pending file {u64 checkpoint id, u64 sequence number}.

#include <sluice/io/file.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dataflow {

class exactly_once_file_sink {
 public:
  static constexpr std::uint32_t state_version = 1;
  static constexpr std::size_t buffer_bytes = 256 * 1024;

  // One pending (staged, fsynced, not yet published) file.
  struct pending_file {
    snapshot::checkpoint_id checkpoint = snapshot::no_checkpoint;
    std::uint64_t sequence = 0;
    bool operator==(const pending_file&) const = default;
  };
  // The decoded state, for tests and checkpoint inspection.
  struct state {
    snapshot::task_id task = 0;
    std::uint64_t next_sequence = 0;
    std::vector<pending_file> pending;
  };
  static std::vector<std::byte> encode_state(const state& s);
  // Errors name what is wrong: "decode file sink state: truncated (7 bytes)".
  static io::result<state> decode_state(std::span<const std::byte> bytes);

  exactly_once_file_sink(std::string output_dir, snapshot::task_id task);
  exactly_once_file_sink(exactly_once_file_sink&&) noexcept = default;
  exactly_once_file_sink& operator=(exactly_once_file_sink&&) noexcept = default;
  exactly_once_file_sink(const exactly_once_file_sink&) = delete;
  exactly_once_file_sink& operator=(const exactly_once_file_sink&) = delete;
  // Dropping a sink without close() closes its staging file synchronously (no publish).
  ~exactly_once_file_sink() = default;

  // `state` is decoded before the first suspension, so it need not outlive the call.
  runtime::task<io::result<void>> recover(std::span<const std::byte> state);
  // The line's bytes are copied before the first suspension, so `line` need not outlive the call.
  runtime::task<io::result<void>> write(std::string_view line);
  runtime::task<io::result<std::vector<std::byte>>> snapshot(snapshot::checkpoint_id id);
  runtime::task<io::result<void>> commit(snapshot::checkpoint_id id);
  void abort(snapshot::checkpoint_id id) noexcept;
  runtime::task<void> close();

  // The private staging area's name inside the output directory.
  static constexpr std::string_view staging_dir_name = ".sluice-staging";

  // Paths of this task's files.
  std::string staging_dir() const;  // <dir>/.sluice-staging
  std::string staging_path(std::uint64_t sequence) const;
  std::string final_path(std::uint64_t sequence) const;
  // File names (no directory): "staged-00003-000000000007" (in the staging area),
  // "part-00003-000000000007" (in the output directory), "next-00003-000000000008" (the
  // high-water mark, in the staging area).
  static std::string staging_name(snapshot::task_id task, std::uint64_t sequence);
  static std::string final_name(snapshot::task_id task, std::uint64_t sequence);
  static std::string high_water_name(snapshot::task_id task, std::uint64_t next);

  // A fresh start (no checkpoint to resume) in an output directory that is already the job's own:
  // removes the output of its earlier runs, of every task id (an earlier run may have had another
  // parallelism or shape), but only files provably written by a sink (a published part file below
  // its task's high-water mark, a staged file in the staging area). A part-named file that is not
  // provably ours is left alone and refuses the start (the message names it). BLOCKING: start-up.
  // `mine`: only the files of tasks it accepts are looked at (a worker of a job across workers
  // clears its own tasks' files; the others' belong to their workers); empty: every task's.
  static io::result<void> clear_earlier_output(const std::string& dir,
                                               const std::function<bool(std::uint64_t task)>& mine = {});

  const std::string& output_dir() const noexcept { return dir_; }
  std::uint64_t next_sequence() const noexcept { return next_sequence_; }
  std::vector<pending_file> pending() const;
  bool failed() const noexcept { return failure_.has_value(); }

 private:
  struct pending_entry {
    pending_file file;
    bool renamed = false;  // renamed, but the directory fsync that makes it durable has not succeeded
  };

  runtime::task<io::result<void>> open_staging();
  runtime::task<io::result<void>> raise_high_water(std::uint64_t next);
  runtime::task<io::result<void>> flush();
  io::error fail(io::error e);
  io::error failed_error(const char* op) const;
  state current_state() const;

  std::string dir_;
  snapshot::task_id task_;
  bool recovered_ = false;
  std::uint64_t next_sequence_ = 0;
  std::vector<pending_entry> pending_;  // in sequence order
  std::optional<std::uint64_t> high_water_;  // the mark on disk (next-<task>-<n>), if there is one

  io::file staging_;                     // open between the first write after a snapshot and the next snapshot
  std::uint64_t staging_sequence_ = 0;
  std::uint64_t staging_offset_bytes_ = 0;  // bytes of the staging file written so far
  std::vector<char> buffer_;
  std::optional<io::error> failure_;
  bool busy_ = false;  // a call is in progress: calls must not overlap
};

}  // namespace sluice::dataflow
