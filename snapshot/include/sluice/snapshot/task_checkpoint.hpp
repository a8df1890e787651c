#pragma once
// task_checkpoint: one task's side of a checkpoint, from its barrier to its acknowledgement. The
// stream task (dataflow) implements checkpoint_subject, a narrow view of what it holds; this class
// owns the choreography and the task's channel_state_writer (invariants 4, 7, 8).
//
// At the task's snapshot for checkpoint N (its barrier was taken, or a source was triggered):
// - aligned (and at-least-once): the output is drained, so everything before the barrier is out,
//   and the barrier goes in-band; the writer gets operator state only (scenario 13). Aligned with
//   a timeout into a partition does not drain: the backlog is stored instead, and if the in-band
//   barrier is still queued when the alignment timeout passes it becomes a priority event; the
//   buffers it overtook are then this task's output channel state (switch_after_timeout).
// - unaligned: a priority barrier overtakes the queued output, whose buffers become output channel
//   state; then the unread input (per channel: the half-read record of its deserializer, then the
//   unread rest of the current buffer), the sink's unwritten lines, the output backlog and the
//   operator state. The barrier handler's captures (capture()) follow until every channel's barrier
//   is in (finish_input()). A sink's precommit (sink_state) is not awaited in line: the sink is held
//   (hold_sink) and the precommit runs while the task takes its other channels' barriers; its state
//   completes the file when it is in, and its failure fails the task (fail_task).
// Channel state is a byte stream per channel, not whole records: a sender's part may begin inside
// a record whose first part the receiver holds as its partial record. The receiver's part, then the
// sender's part, then what follows on the channel, is the exact stream; recovery feeds them in that
// order. The task reports N written as soon as its file holds every byte (the writer's on_written,
// before the fsync), and a watcher acknowledges or declines N once the writer's result is in.
//
// Every call runs on the task's executor.

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>
#include <sluice/snapshot/deferred_state.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::snapshot {

// The sections of a task's state file beyond its chain's operators (which are 0, 1, 2, ... in chain
// order). The numbers are part of the file format.
enum class state_section : std::uint32_t {
  source = 1000,          // a source's position (replayable offset)
  sink = 1001,            // a sink's staged, unwritten and uncommitted output
  output_backlog = 1002,  // records produced before the barrier, not yet in the partition
};
constexpr std::uint32_t section_index(state_section s) noexcept { return static_cast<std::uint32_t>(s); }
// The chain's operators take the indices below this.
inline constexpr std::uint32_t max_chain_operators = 1000;

// The operator states a snapshot takes: bytes taken at once, and the parts written in slices after
// the task went on (deferred_state.hpp), each after its operator's bytes in the file.
struct taken_state {
  std::vector<operator_snapshot> now;
  std::vector<deferred_operator_state> later;
};

// What a checkpoint takes from a task.
class checkpoint_subject {
 public:
  virtual ~checkpoint_subject() = default;
  // The chain's operator states (index = position) and a source's position (state_section::source):
  // the synchronous part of the snapshot, O(1) in the state's size for keyed state.
  virtual taken_state operator_states(checkpoint_id id) = 0;
  virtual bool is_sink() const noexcept = 0;
  // A sink's state at `id` (state_section::sink); only for a sink.
  virtual runtime::task<io::result<std::vector<std::byte>>> sink_state(checkpoint_id id) = 0;
  // An unaligned checkpoint takes a sink's state (a precommit: flushes, fsyncs, a broker's round
  // trip) while the task goes on taking its other channels' barriers. hold_sink() comes at the
  // barrier, before sink_state(id): from then until sink_state(id) returns, the sink writes
  // nothing, so no record from after the barrier reaches what that checkpoint commits.
  virtual void hold_sink() = 0;
  // That deferred sink_state failed: the task must fail with `error` (a precommit's error ends the
  // task, as it does when awaited in line).
  virtual void fail_task(io::error error) = 0;
  // Records queued in front of the partition (state_section::output_backlog); nullopt: the output
  // keeps no backlog (a sink).
  virtual std::optional<std::vector<std::byte>> output_backlog() const = 0;
  virtual bool output_backlogged() const noexcept = 0;
  virtual runtime::task<io::result<void>> drain_output() = 0;

  // The input taken from the gate but not yet processed, per channel, in stream order.
  struct unconsumed_input {
    std::uint32_t channel = 0;
    std::vector<std::byte> partial;           // the bytes of a half-read record
    std::optional<buffers::buffer_view> rest;  // the unread rest of the current buffer
  };
  virtual std::vector<unconsumed_input> unconsumed() = 0;
};

struct task_checkpoint_options {
  task_id task = 0;
  std::string name;  // "count#1", for messages
  checkpoint_acknowledger* acknowledger = nullptr;
  buffers::result_partition* partition = nullptr;  // none for a sink stage
  bool has_input = false;                          // a gate: input channel state may follow
  std::chrono::milliseconds alignment_timeout{0};  // aligned_timeout
  // How long the alignment of `id` took (first barrier in to snapshot), for the acknowledgement.
  std::function<std::chrono::nanoseconds(checkpoint_id)> alignment_of;
};

class task_checkpoint {
 public:
  // On the task's executor.
  task_checkpoint(task_checkpoint_options options, checkpoint_subject& subject);
  task_checkpoint(const task_checkpoint&) = delete;
  task_checkpoint& operator=(const task_checkpoint&) = delete;

  // The snapshot for `id` into `dir` (chk-<id>/, prepared by the coordinator). An error fails the
  // task (a partition that closed); a checkpoint that cannot be taken is declined, not an error.
  runtime::task<io::result<void>> take(checkpoint_id id, checkpoint_mode mode, std::string dir);

  // The barrier handler's actions.
  void capture(checkpoint_id id, std::uint32_t channel, std::vector<buffers::buffer_view> views);
  void finish_input(checkpoint_id id);
  // Aborts `id` here (the coordinator said so, or the handler gave up): nothing is reported.
  void abort(checkpoint_id id, abort_reason reason, std::string_view detail);
  // Aborts `id` and declines it to the coordinator, then sends a cancellation marker downstream.
  runtime::task<io::result<void>> decline(checkpoint_id id, abort_reason reason, std::string detail);

  // Sends `event` to every consumer: in-band, or as a priority event overtaking the queued data
  // (the views of the overtaken buffers per subpartition go to *overtaken when given). Barriers and
  // cancellation markers take their buffer from the partition's priority pool, never waiting for a
  // data buffer of a backpressured partition.
  runtime::task<io::result<void>> forward_event(buffers::gate_event event, bool priority,
                                               std::vector<std::vector<buffers::buffer_view>>* overtaken,
                                               std::optional<buffers::buffer_view>* keep = nullptr);

  // Ends the writer and the watchers; before destruction.
  runtime::task<void> close();

  channel_state_writer& writer() noexcept { return writer_; }

 private:
  io::error failure(std::string what) const;
  // Whether the writer took the checkpoint (a watcher then reports it).
  runtime::task<io::result<bool>> take_aligned(checkpoint_id id, checkpoint_mode mode, std::string dir,
                                               taken_state ops);
  runtime::task<io::result<bool>> take_unaligned(checkpoint_id id, std::string dir, taken_state ops);
  // The operator states (and the backlog) into the file, and its output side finished once the
  // deferred parts are written.
  void add_operator_states(checkpoint_id id, taken_state ops, std::optional<std::vector<std::byte>> backlog);
  void add_taken_now(checkpoint_id id, taken_state& ops);
  // An unaligned sink's precommit, awaited while the task goes on; then add_operator_states.
  runtime::task<void> add_sink_state(checkpoint_id id, taken_state ops, std::optional<std::vector<std::byte>> backlog);
  // The deferred parts, slice by slice (the executor runs its other work between slices); false at
  // the first slice the writer refuses (the checkpoint was aborted), or when one throws.
  runtime::task<bool> write_deferred(checkpoint_id id, std::vector<deferred_operator_state> later);
  runtime::task<void> write_deferred_then_finish(checkpoint_id id, std::vector<deferred_operator_state> later);
  // An exception in the work a checkpoint left running beside the task (the deferred parts written
  // or finished: a state that does not encode; a watcher's wait for the outcome) aborts the
  // checkpoint and fails the task, as a failed precommit does: nothing else would end it.
  void fail_checkpoint(checkpoint_id id, std::string_view part, const std::exception& e);
  void finish_deferred(checkpoint_id id);
  bool barrier_queued(const buffers::buffer_view& barrier) const;
  runtime::task<void> switch_after_timeout(checkpoint_id id, buffers::buffer_view barrier,
                                           std::vector<deferred_operator_state> later);
  // false: the task is stopping (the checkpoint will not complete).
  runtime::task<bool> switch_when_due(checkpoint_id id, buffers::buffer_view barrier);
  // Reports `id` once the writer's result is in; `unaligned`: the snapshot was taken unaligned.
  runtime::task<void> watch(checkpoint_id id, std::chrono::steady_clock::time_point snapshot_started,
                            std::chrono::nanoseconds sync, bool unaligned);
  // The acknowledger told of a checkpoint's outcome, with the task's figures.
  void report(checkpoint_id id, const checkpoint_outcome& outcome, std::chrono::steady_clock::time_point snapshot_started,
              std::chrono::nanoseconds sync, bool unaligned);

  task_checkpoint_options options_;
  checkpoint_subject* subject_;
  channel_state_writer writer_;
  runtime::scope watchers_;
  checkpoint_id output_switched_ = no_checkpoint;  // the last checkpoint whose barrier overtook the output
};

}  // namespace sluice::snapshot
