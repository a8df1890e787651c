#pragma once
// checkpoint_participant: how the checkpoint coordinator sees a task, and what a task reports back.
//
// Protocol (docs/design.md "Checkpointing", invariants 2 and 4). The coordinator never touches a task's
// state. It calls a participant's methods only by posting them to the participant's executor, so
// each one runs there, in the order the coordinator sent them (the inbox is FIFO per sender):
//   trigger_checkpoint(N)          sources only: inject barrier N into the stream;
//   notify_checkpoint_complete(N)  every task of N, once N's manifest is durable: sinks commit here;
//   notify_checkpoint_aborted(N)   every task of N, with the reason; it may arrive before barrier N.
// The task answers from its own executor with coordinator::acknowledge (its state file for N is
// written and fsynced) or coordinator::decline; both post to the coordinator. Before acknowledging
// it may report written (the file holds every byte, its fsync runs), so the coordinator writes the
// manifest while the tasks' fsyncs run; N completes only once every acknowledgement is in. Ids only grow, and a
// task must accept any order: complete(N+1) before abort(N), abort(N) before barrier N.
//
// The methods must not block. They may call acknowledge/decline directly (those only post).
// A participant stays alive, and keeps its executor running, until coordinator::remove_participant
// has returned for it: after that no call reaches it.

#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/manifest.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::runtime {
class executor;
}

namespace sluice::snapshot {

// What a source needs to inject a barrier, beyond its id and mode.
struct trigger_options {
  // aligned_timeout: alignment beyond this switches the checkpoint to unaligned.
  std::chrono::milliseconds alignment_timeout{0};
};

// What a task reports with its acknowledgement of checkpoint N.
struct task_checkpoint_stats {
  std::uint64_t operator_state_bytes = 0;
  std::uint64_t channel_state_bytes = 0;
  std::chrono::nanoseconds alignment_duration{0};  // first barrier in to snapshot taken
  // The synchronous part of the snapshot: the operators' states taken (keyed state frozen) while
  // the task, and every task of its executor, waited.
  std::chrono::nanoseconds sync_duration{0};
  // Snapshot taken to state file written, before its fsync (an unaligned snapshot's file is
  // written until the last input channel's barrier is in: that wait counts here).
  std::chrono::nanoseconds write_duration{0};
  std::chrono::nanoseconds fsync_duration{0};  // the state file's fsync
  // When the task began its snapshot, on its executor's clock (executor::now()). Within one process
  // the executors share the steady clock, so the coordinator subtracts its trigger time for the
  // task's start delay. Empty when the acknowledgement comes from another process (cluster/: another
  // host's steady clock means nothing here), so no start delay is reported for it.
  std::optional<std::chrono::steady_clock::time_point> snapshot_started_at;
  // This task's part went unaligned: its snapshot was taken unaligned (its alignment timed out, or
  // an upstream's priority barrier arrived), or its in-band barrier overtook its queued output after
  // the alignment timeout. A switch only for a checkpoint triggered aligned_timeout (the coordinator
  // checks the mode).
  bool switched_to_unaligned = false;
  // The writer's own description of its durable state file (size and CRC32C of the whole file; the
  // name is filled in by the coordinator). Used for the manifest only when the coordinator runs with
  // verify_state_files = false; otherwise the coordinator reads the file back and validates it.
  std::optional<manifest_file> state_file;
};

// Where a task reports its checkpoints: the coordinator (or a test's recorder). Both calls only post.
class checkpoint_acknowledger {
 public:
  virtual ~checkpoint_acknowledger() = default;
  // The task's state file for `id` holds every byte; its fsync is under way (acknowledge follows,
  // or decline). Optional: an acknowledgement implies it.
  virtual void written(task_id, checkpoint_id) {}
  // The task's state file for `id` is durable.
  virtual void acknowledge(task_id task, checkpoint_id id, task_checkpoint_stats stats) = 0;
  virtual void decline(task_id task, checkpoint_id id, abort_reason reason, std::string detail) = 0;
};

class checkpoint_participant {
 public:
  virtual ~checkpoint_participant() = default;

  // Fixed for the participant's lifetime; read once, by add_participant, on the caller's thread.
  virtual task_id id() const noexcept = 0;
  virtual bool is_source() const noexcept = 0;
  virtual runtime::executor& home() const noexcept = 0;

  // Each runs on home(), posted by the coordinator.
  virtual void trigger_checkpoint(checkpoint_id id, checkpoint_mode mode, const trigger_options& options) = 0;
  virtual void notify_checkpoint_complete(checkpoint_id id) = 0;
  virtual void notify_checkpoint_aborted(checkpoint_id id, abort_reason reason, std::string_view detail) = 0;
};

}  // namespace sluice::snapshot
