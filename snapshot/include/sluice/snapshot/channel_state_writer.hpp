#pragma once
// channel_state_writer: persists one task's checkpoint state (captured channel buffers and operator
// state) to `chk-<id>/task-<task>.state` (state_file.hpp) with io_uring writes, while the task runs
// on. One writer per task, owned by the task's executor; every call runs there (asserted).
//
// Lifecycle (invariant 4: every call is legal in any order, for any id):
// - Two monotonic watermarks: the latest started id and the highest aborted id. start(N) opens N
//   only if N is above both; otherwise it is a no-op (an abort before the start is remembered, an
//   old or repeated barrier is ignored) and does no I/O.
//   So a start at or below an aborted id is refused as well (as in Flink's maxAbortedCheckpointId).
// - At most ONE checkpoint is ongoing. start(N+1) while N is open ends N as aborted(subsumed).
//   abort(M) of an id above the ongoing one is remembered and leaves the ongoing one open.
// - add_input/add_output/add_operator_state/add_operator_base enqueue and return at once; they
//   never suspend. A writer-owned coroutine (the pump) writes the records in call order at offsets
//   fixed at enqueue: consecutive small records (header and payload) copied into one buffer, up to
//   512 KiB, and written at once; a payload above 128 KiB (a large operator state) straight from its memory,
//   after its header. A view is released once copied (or, written in place, once its write
//   completed), or at the abort of its checkpoint: exactly once either way.
// - Once abort(N) happened, no write for N is submitted: not the next record, not a payload after
//   its header, not the rest of a write the kernel cut short (scenario 3; asserted). Writes already
//   in flight complete.
// - A call the writer cannot take (before start, after finish, after close, an old or aborted id,
//   an event as data) returns an error naming the fault (writer_errc) and releases the buffers it
//   was given. Nothing here throws for such a call, and no abort fails the task. An event among
//   the data also declines the ongoing checkpoint: its channel state would be incomplete.
// - The checkpoint completes once finish_input and finish_output were both called and every write
//   is done: the pump writes the `end` record, fsyncs and closes the file. start_aligned() opens a
//   checkpoint with operator state only (scenario 13): both finishes are implied. Between the `end`
//   record and the fsync the file holds all its bytes (not yet durable): the on_written callback
//   runs then, so the coordinator can write the manifest while the fsync runs.
// - An I/O error (ENOSPC, EIO, a write with no progress) aborts that checkpoint with io_error and
//   the file path and errno text; its queued buffers are released; the next checkpoint can succeed.
//   The file of an aborted checkpoint is closed and LEFT in place, unsynced, and without an `end`
//   record unless the abort came while the write carrying it was in flight; no manifest names it
//   (recovery reads files only through a manifest), and storage's retention removes the directory.
// - close() aborts the ongoing checkpoint (cancelled), stops in-flight I/O through the stop token,
//   waits for the pump, and resolves every result waiter. Call it before destruction.
//
// How result(id) answers (it always resolves, never "missing"):
// - id 0: aborted(declined).
// - the ongoing id, or an id above both watermarks: waits until that id is decided.
// - an id among the last `outcome_history` outcomes (completed, aborted, subsumed, aborted before
//   start), or the last completed id: that outcome, exactly.
// - any other id at or below a watermark (never started, or its outcome has left the history):
//   aborted(subsumed).
// - after close(): anything undecided is aborted(cancelled). A waiter whose own task is stopped
//   resumes with aborted(cancelled) too.
//
//   channel_state_writer writer(task);                       // on the task's executor
//   writer.start(7, "/ckpt/chk-7");                          // on the first barrier
//   auto r = writer.add_input(7, gate, channel, std::move(views));
//   if (!r) log::warn("{}", r.error().message());            // buffers already released
//   writer.finish_input(7); writer.finish_output(7);
//   checkpoint_outcome outcome = co_await writer.result(7);
//   ...  co_await writer.close();                            // at task shutdown

#include <sluice/buffers/buffer.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/detail/wait_list.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/state_file.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace sluice::snapshot {

// Why the writer refused a call. The refused call's buffers have been released.
enum class writer_errc {
  invalid_id = 1,    // checkpoint id 0
  not_started,       // the id is above every started or aborted id: data (or finish) before start
  stale,             // start of an id not above the latest started one (a repeated or old barrier)
  aborted,           // the checkpoint was aborted (or subsumed, or is older than the ongoing one)
  finished,          // the checkpoint completed, or this direction was already finished
  closed,            // the writer is closed (task shutdown)
  not_data,          // an event was handed as channel-state data (the checkpoint is declined)
  no_channel_state,  // channel state for a checkpoint opened with start_aligned
  bad_base,          // an operator's delta base that is 0, not below the checkpoint, or its second
};
const std::error_category& writer_category() noexcept;
inline std::error_code make_error_code(writer_errc e) noexcept { return {static_cast<int>(e), writer_category()}; }

}  // namespace sluice::snapshot

template <>
struct std::is_error_code_enum<sluice::snapshot::writer_errc> : std::true_type {};

namespace sluice::snapshot {

// One operator's snapshot: opaque bytes, written as operator_state records (index = operator).
struct operator_snapshot {
  std::uint32_t operator_index = 0;
  std::vector<std::byte> bytes;
};

class channel_state_writer {
 public:
  // Outcomes kept for result(id) besides the ongoing checkpoint (scenario 14: bounded).
  static constexpr std::size_t outcome_history = 16;

  // On the owner executor (the current one).
  explicit channel_state_writer(task_id task);
  // Asserts close() ran, or that nothing is pending.
  ~channel_state_writer();
  channel_state_writer(const channel_state_writer&) = delete;
  channel_state_writer& operator=(const channel_state_writer&) = delete;

  // Opens checkpoint `id`: its state file goes to `<target_dir>/task-<task>.state` (the directory
  // exists). A no-op with an error (stale, aborted, closed, invalid_id) unless id is new.
  io::result<void> start(checkpoint_id id, std::string target_dir);
  // An aligned checkpoint (or savepoint): operator state only, no channel state ever; the
  // finishes are implied, so it completes once these records are written.
  io::result<void> start_aligned(checkpoint_id id, std::string target_dir,
                                 std::vector<operator_snapshot> operator_states);

  // Channel state of input channel (gate, channel) / of output (partition, subpartition): each
  // view becomes one record, in order. Every view is released by the writer, whatever the result.
  io::result<void> add_input(checkpoint_id id, std::uint16_t gate, std::uint32_t channel,
                             std::vector<buffers::buffer_view> data);
  io::result<void> add_output(checkpoint_id id, std::uint16_t partition, std::uint32_t subpartition,
                              std::vector<buffers::buffer_view> data);
  // Input channel state that is in no buffer any more: the half-read record of a channel's
  // deserializer (record_deserializer::partial_record), which comes first in that channel's state.
  io::result<void> add_input_bytes(checkpoint_id id, std::uint16_t gate, std::uint32_t channel,
                                   std::vector<std::byte> bytes);
  // Operator state, before the last finish of an unaligned checkpoint.
  io::result<void> add_operator_state(checkpoint_id id, std::uint32_t operator_index, std::vector<std::byte> bytes);
  // Marks operator `operator_index`'s state in this checkpoint as a delta on its state in checkpoint
  // `base` of the same task (an operator_base record, state_file.hpp): recovery reads that first.
  // Refused (bad_base) unless 0 < base < id and the operator has no base yet in `id`; like
  // add_operator_state, refused once the checkpoint is finished. Its 8 bytes count as neither
  // operator nor channel state.
  io::result<void> add_operator_base(checkpoint_id id, std::uint32_t operator_index, checkpoint_id base);

  // No more input (output) channel state for `id`. Repeating one is harmless.
  io::result<void> finish_input(checkpoint_id id);
  io::result<void> finish_output(checkpoint_id id);

  // Aborts `id` if it is ongoing, remembers it if it has not started, and leaves an ended id's
  // outcome as it is (a completed checkpoint stays completed).
  void abort(checkpoint_id id, abort_reason reason, std::string detail = {});

  // How `id` ended, waiting while it is undecided (see the top of this file). The writer must
  // outlive the wait; close() resolves every waiter.
  runtime::task<checkpoint_outcome> result(checkpoint_id id);
  // The same answer without waiting: nullopt while `id` is undecided.
  std::optional<checkpoint_outcome> try_result(checkpoint_id id) const;

  // Called on the owner executor, from the pump, once checkpoint `id`'s file holds every byte (its
  // `end` record written) and its fsync is about to start. Not called for an aborted checkpoint;
  // result(id) still decides whether the file became durable.
  void on_written(std::function<void(checkpoint_id)> callback) { on_written_ = std::move(callback); }

  // Aborts the ongoing checkpoint (cancelled), cancels in-flight writes, waits for the pump and
  // resolves every waiter. Later calls are refused with writer_errc::closed. Idempotent.
  runtime::task<void> close();

  // --- observers (tests, metrics) -------------------------------------------------------------
  task_id task() const noexcept { return task_; }
  checkpoint_id ongoing() const noexcept;  // no_checkpoint if none
  checkpoint_id latest_started() const noexcept { return latest_started_; }
  checkpoint_id max_aborted() const noexcept { return max_aborted_; }
  // Checkpoints with state in this writer: ongoing + retiring (closing its file) + kept outcomes.
  // At most 2 + outcome_history.
  std::size_t tracked_checkpoints() const noexcept;
  std::size_t queued_writes() const noexcept;  // records enqueued and not yet written (ongoing)
  std::size_t result_waiters() const noexcept { return waiters_.size(); }
  bool closed() const noexcept { return closed_; }

 private:
  struct pending_write;
  struct checkpoint_job;
  struct kept_outcome {
    checkpoint_id id = no_checkpoint;
    checkpoint_outcome outcome;
  };
  class result_awaiter;

  void assert_owner() const noexcept;
  checkpoint_id known() const noexcept { return latest_started_ > max_aborted_ ? latest_started_ : max_aborted_; }
  const checkpoint_outcome* kept(checkpoint_id id) const noexcept;
  // Why a call for `id` (not the ongoing one) cannot be taken.
  io::error refusal(const char* what, checkpoint_id id) const;
  io::result<void> open_job(checkpoint_id id, std::string target_dir, bool channel_state,
                            std::vector<operator_snapshot> operator_states);
  io::result<void> add_channel_state(const char* what, record_type type, checkpoint_id id, std::uint16_t group,
                                     std::uint32_t index, std::vector<buffers::buffer_view> data);
  io::result<checkpoint_job*> channel_state_job(const char* what, record_type type, checkpoint_id id,
                                                std::uint16_t group, std::uint32_t index);
  void enqueue_bytes(checkpoint_job& job, record_type type, std::uint16_t group, std::uint32_t index,
                     std::vector<std::byte> bytes);
  void enqueue(checkpoint_job& job, record_type type, std::uint16_t group, std::uint32_t index,
               buffers::buffer_view view, std::vector<std::byte> bytes);
  // Ends the ongoing checkpoint as aborted: releases its queued buffers, records the outcome, and
  // hands an opened file to the pump to close.
  void abort_ongoing(abort_reason reason, std::string detail);
  void settle(checkpoint_id id, checkpoint_outcome outcome);
  void wake_decided();
  void kick();

  // The pump (channel_state_writer_io.cpp): runs while there is I/O to do, one step (one write, or
  // the fsync and close) at a time.
  runtime::task<void> pump();
  runtime::task<void> advance(checkpoint_job* job);
  runtime::task<void> write_next(checkpoint_job* job);
  static runtime::task<void> write_record(checkpoint_job* job, pending_write* record,
                                          std::optional<io::error>* failed);
  static runtime::task<io::result<std::size_t>> submit_write(checkpoint_job* job, std::span<const std::byte> data,
                                                             std::uint64_t offset);
  static runtime::task<io::result<void>> write_unless_aborted(checkpoint_job* job, std::span<const std::byte> data,
                                                              std::uint64_t offset);
  static std::array<std::byte, state_record_header_bytes + state_end_payload_bytes> end_record(
      const checkpoint_job& job);
  runtime::task<void> sync_and_close(checkpoint_job* job);
  runtime::task<void> retire();
  void fail(checkpoint_job& job, const io::error& error);
  void complete_ongoing();  // its file durable and closed: the ongoing checkpoint completed

  runtime::executor* owner_;
  task_id task_;
  checkpoint_id latest_started_ = no_checkpoint;
  checkpoint_id max_aborted_ = no_checkpoint;
  std::unique_ptr<checkpoint_job> current_;   // the ongoing checkpoint
  std::unique_ptr<checkpoint_job> retiring_;  // aborted; the pump closes its file (at most one)
  std::deque<kept_outcome> history_;          // newest last, at most outcome_history
  std::optional<kept_outcome> last_completed_;
  runtime::detail::wait_list waiters_;        // result_awaiters of undecided ids
  std::function<void(checkpoint_id)> on_written_;
  runtime::scope pump_scope_;
  bool pumping_ = false;
  bool closing_ = false;
  bool closed_ = false;
  runtime::event closed_event_;
};

}  // namespace sluice::snapshot
