#pragma once
// coordinator: triggers checkpoints, collects the tasks' acknowledgements, commits each checkpoint's
// manifest and tells the tasks how it ended (docs/design.md "Checkpointing", invariants 2, 4, 7, 8).
//
// Lifecycle of checkpoint N (ids strictly increase, never reused; see recovery_plan.hpp):
//   1. trigger (every `interval`, at least `min_pause` after the previous checkpoint ended, at most
//      `max_concurrent` in flight; or trigger_now()): mkdir chk-N/, start preparing it (below), then
//      post trigger(N) to sources. Preparing (checkpoint_storage::prepare_checkpoint) runs
//      concurrently with the tasks' snapshots, never delaying the trigger: it creates `_manifest`
//      and every task's state file name empty (never truncating) and fsyncs chk-N/ and the root,
//      so the commit needs only the manifest's own bytes durable.
//      Periodic checkpoints prepare AHEAD (coordinator_prepare.cpp): when checkpoint N-1 ends, chk-N/
//      is made and prepared for the tasks registered then, so N's trigger finds it ready (no mkdir
//      before the trigger, and no creates and directory fsyncs of the preparation contending with
//      the tasks' own file I/O). If the task set changed, the trigger prepares what is
//      missing as above. Not with reserve_ids (cluster/: an id is used only once reserved); an
//      unused prepared directory is removed by stop(), and one a crash leaves behind is an
//      uncommitted checkpoint like any other (recovery skips it, retention removes it).
//   2. wait until every task registered at the trigger reported N written (its state file holds
//      every byte; its fsync runs) or acknowledged it (durable, which implies written). A decline,
//      `checkpoint_timeout` (expired), a task joining or leaving (coordinator), a newer checkpoint
//      completing (subsumed) or stop() (cancelled) aborts N instead.
//   3. commit: wait for the preparation (its failure aborts N with io_error), then, concurrently,
//      (a) describe each task's file (read back and validated end to end, or the writer's
//      description with verify_state_files = false) and write the manifest (in place, fdatasync),
//      and (b) wait until every task acknowledged N (its state file durable). So the manifest's
//      write and sync overlap the tasks' fsyncs instead of following them. N completes only once
//      both are done (and, with `publish`, published): the manifest and every file it names are
//      durable. A crash in between leaves a manifest whose files do not validate (recovery skips
//      it) or whose files all are durable. If a task declines, leaves or does not acknowledge in
//      time, or stop() comes, before every acknowledgement is in, N aborts and its manifest, once
//      written, is taken back (unlinked, the directory fsynced).
//      Commits run one at a time, in completion order; once every task acknowledged, only the
//      commit's own failure (io_error) can abort N.
//   4. post complete(N) to every task of N (sinks commit staged output), abort older pending
//      checkpoints as subsumed, then run a retention pass (keep the newest K, drop aborted dirs).
//      An aborted N instead posts abort(N, reason) to every task of N; retention removes chk-N/ once
//      a newer checkpoint has committed.
//
// Threading: the coordinator lives on its home executor and its state is touched only there (no
// lock, no atomic: invariant 1). Tasks reach it only through posts: add_participant, acknowledge and
// decline may be called from any thread; remove_participant from any executor. Everything else runs
// on home (from elsewhere: co_await run_on(&home, c.trigger_now())). It calls tasks only through
// posts to their executors.
//
// Lifetime: call stop() (on home) and remove every participant, or stop their executors, before
// destroying the coordinator; a message posted to it after that would reach a dead object.

#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/semaphore.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sluice::runtime {
class executor;
}

namespace sluice::snapshot {

struct checkpoint_stats;

struct coordinator_options {
  std::chrono::milliseconds interval{1000};            // between periodic triggers
  std::chrono::milliseconds min_pause{0};              // from one checkpoint's end to the next trigger
  std::chrono::milliseconds checkpoint_timeout{600'000};  // chk-N/ made to all acknowledged, else expired
  std::size_t max_concurrent = 1;                      // checkpoints in flight (>= 1)
  checkpoint_mode mode = checkpoint_mode::aligned;     // of periodic checkpoints
  std::chrono::milliseconds alignment_timeout{0};      // passed to sources (aligned_timeout)
  std::size_t expected_tasks = 0;  // periodic triggers wait for this many tasks (0: at least one)
  std::size_t history_size = 16;   // checkpoint_stats kept (>= 1)
  checkpoint_id first_checkpoint_id = 1;  // recovery_plan::next_checkpoint_id after a restart
  bool verify_state_files = true;  // read every state file back before the manifest vouches for it
  std::map<std::string, std::vector<std::byte>> job_metadata;  // written into every manifest
  // Called on home with each checkpoint's stats as it ends (completed or aborted).
  std::function<void(const checkpoint_stats&)> on_checkpoint_end;
  // A job spread over workers (cluster/): ids are reserved before they are used, and a checkpoint
  // completes only once it is published, both through the coordination service and fenced by the
  // leader's epoch, so a coordinator that lost its leadership can neither reuse an id nor complete.
  // - reserve_ids(up_to): ids up to `up_to` may be used; on failure no checkpoint is triggered (the
  //   trigger is retried one interval later; trigger_now aborts with io_error).
  // - publish(id): after the manifest is durable; on failure the checkpoint aborts (io_error), its
  //   manifest stays on disk but recovery never goes beyond the published id.
  std::function<runtime::task<io::result<void>>(checkpoint_id up_to)> reserve_ids;
  checkpoint_id reserve_block = 16;
  std::function<runtime::task<io::result<void>>(checkpoint_id id)> publish;
};

// One task's part of a checkpoint, from its acknowledgement (task_checkpoint_stats).
struct task_checkpoint_breakdown {
  task_id task = 0;
  // Trigger (home's clock) to the task's snapshot start (its executor's clock: the same steady clock
  // within a process). Empty for a task of another process (cluster/), whose clock is another's.
  std::optional<std::chrono::nanoseconds> start_delay;
  std::chrono::nanoseconds alignment_duration{0};
  std::chrono::nanoseconds sync_duration{0};  // the snapshot's synchronous part (task_checkpoint_stats)
  std::chrono::nanoseconds write_duration{0};
  std::chrono::nanoseconds fsync_duration{0};
  std::uint64_t operator_state_bytes = 0;
  std::uint64_t channel_state_bytes = 0;
  bool switched_to_unaligned = false;  // only for a checkpoint triggered aligned_timeout
};

// One checkpoint as it ended.
struct checkpoint_stats {
  checkpoint_id id = no_checkpoint;
  checkpoint_mode mode = checkpoint_mode::aligned;
  std::chrono::steady_clock::time_point triggered_at{};  // the home executor's clock
  std::uint64_t triggered_unix_ms = 0;
  std::chrono::nanoseconds duration{0};                  // trigger to completion (or abort)
  std::chrono::nanoseconds max_alignment_duration{0};    // over the acknowledgements received
  std::chrono::nanoseconds max_sync_duration{0};         // the longest synchronous part of a task's snapshot
  std::uint64_t operator_state_bytes = 0;                // summed over the acknowledgements received
  std::uint64_t channel_state_bytes = 0;
  std::size_t tasks = 0;         // registered at the trigger
  std::size_t acknowledged = 0;  // of those
  checkpoint_outcome outcome;    // completed, or aborted with reason and detail
  std::vector<task_checkpoint_breakdown> task_breakdown;  // per acknowledgement received, by task id
};

class coordinator final : public checkpoint_acknowledger {
 public:
  // `home` runs the coordinator; `storage` is used only from home and must outlive the coordinator.
  coordinator(runtime::executor& home, checkpoint_storage& storage, coordinator_options options = {});
  ~coordinator();
  coordinator(const coordinator&) = delete;
  coordinator& operator=(const coordinator&) = delete;

  // --- tasks (any thread; each posts to home) --------------------------------------------------
  // Registers `p` for the checkpoints triggered from now on (aborts any in flight: the task set
  // changed). `p` must stay alive until remove_participant(p.id()) has returned.
  void add_participant(checkpoint_participant& p);
  // Unregisters `task` (aborting any in-flight checkpoint it belongs to, with `why` in the detail)
  // and resolves once no call from the coordinator can reach it any more. Call from an executor;
  // it resumes on the task's executor, then on the caller's if that differs.
  runtime::task<void> remove_participant(task_id task, std::string why);
  // The task's state file for `id` holds every byte (its fsync runs): the manifest may be written.
  void written(task_id task, checkpoint_id id) override;
  // The task's state file for `id` is durable.
  void acknowledge(task_id task, checkpoint_id id, task_checkpoint_stats stats) override;
  // The task cannot take checkpoint `id` (not_ready while replaying recovered state, io_error, ...).
  void decline(task_id task, checkpoint_id id, abort_reason reason, std::string detail) override;

  // --- the job (home only) ----------------------------------------------------------------------
  // Starts periodic triggering (the first trigger one interval from now).
  void start();
  // Triggers a checkpoint now, ignoring interval and min_pause but waiting for a free slot under
  // max_concurrent, and resolves with its outcome. Aborted(coordinator) if no task is registered,
  // aborted(cancelled) once stop() was called.
  runtime::task<checkpoint_outcome> trigger_now();
  runtime::task<checkpoint_outcome> trigger_now(checkpoint_mode mode);
  // No periodic trigger from now on (checkpoints in flight go on; trigger_now still works): before
  // a job's last checkpoint (the final one, a drain's), so that none follows it only to be
  // cancelled as the job stops.
  void stop_periodic();
  // Aborts every in-flight checkpoint (cancelled; one already committing finishes), stops the
  // trigger loop and joins everything. Idempotent.
  runtime::task<void> stop();

  // Oldest first, at most history_size.
  const std::deque<checkpoint_stats>& stats() const;
  std::optional<checkpoint_stats> last_completed() const;
  // Every checkpoint that ended since the coordinator started (stats() keeps only the last few).
  std::uint64_t completed_count() const noexcept { return completed_count_; }
  std::uint64_t aborted_count() const noexcept { return aborted_count_; }
  checkpoint_id next_checkpoint_id() const;
  std::size_t in_flight() const;
  // The oldest checkpoint still in flight: its id and when it was triggered (home's clock).
  struct running_checkpoint {
    checkpoint_id id = no_checkpoint;
    std::chrono::steady_clock::time_point triggered_at{};
  };
  std::optional<running_checkpoint> oldest_in_flight() const;
  std::size_t participants() const;

 private:
  struct participant_entry {
    checkpoint_participant* participant = nullptr;
    runtime::executor* executor = nullptr;
    bool source = false;
  };
  struct preparation {  // prepare_checkpoint's result; shared with the coroutine that runs it
    runtime::event done;
    std::optional<io::error> failure;
  };
  struct outcome_slot {  // where trigger_now waits; lives in its frame
    runtime::event done;
    checkpoint_outcome outcome;
  };
  enum class stage : std::uint8_t { creating, triggered, committing };
  struct pending_checkpoint {
    checkpoint_id id = no_checkpoint;
    checkpoint_mode mode = checkpoint_mode::aligned;
    std::chrono::steady_clock::time_point triggered_at{};
    std::uint64_t triggered_unix_ms = 0;
    std::map<task_id, participant_entry> tasks;  // the task set at the trigger
    std::set<task_id> written;                      // reported written, or acknowledged
    std::map<task_id, task_checkpoint_stats> acks;  // acknowledged: durable
    stage at = stage::creating;
    std::optional<checkpoint_outcome> verdict;  // an abort, once decided
    runtime::event decided;                     // all written, or verdict set
    runtime::event durable;                     // all acknowledged, or verdict set
    bool committed = false;                     // completed: the manifest and every state file durable
    bool holds_commit_slot = false;
    outcome_slot* waiter = nullptr;
    std::shared_ptr<preparation> prepared;  // set once chk-N/ exists; done before finish()
  };

  void on_added(task_id task, participant_entry entry);
  void on_removed(task_id task, const std::string& why);
  void on_written(task_id task, checkpoint_id id);
  void on_acknowledged(task_id task, checkpoint_id id, task_checkpoint_stats stats);
  void on_declined(task_id task, checkpoint_id id, abort_reason reason, const std::string& detail);
  void request_abort(pending_checkpoint& p, abort_reason reason, std::string detail);
  // The commit itself failed: aborts N (io_error) even once every task acknowledged.
  static void fail_commit(pending_checkpoint& p, std::string detail);
  void abort_all_pending(abort_reason reason, const std::string& detail);

  runtime::task<void> trigger_loop();
  runtime::task<bool> wait_for_slot();  // false once stopping
  // Reserves ids (reserve_ids) if next_id_ is beyond those reserved; false if that failed.
  runtime::task<bool> reserve_next();
  checkpoint_id begin_checkpoint(checkpoint_mode mode, outcome_slot* waiter);
  runtime::task<void> run_checkpoint(checkpoint_id id);
  runtime::task<void> drive(checkpoint_id id);
  // --- chk-N/ (coordinator_prepare.cpp) ---
  // Step 1's directory: taken from ahead_ when it was prepared for N and the same tasks, else made
  // (an existing one is fine then) and its preparation started. Sets p.prepared, or the verdict.
  runtime::task<void> open_dir(pending_checkpoint& p);
  // After a periodic checkpoint ended: chk-<next id>/ made and prepared for the tasks registered now.
  void prepare_ahead();
  // At stop(): a directory prepared ahead that no checkpoint used is removed.
  runtime::task<void> discard_ahead();
  // Runs prepare_checkpoint to its end (not cancelled by stop()) and records its result; with
  // `make_dir`, mkdir chk-<id>/ first.
  static runtime::task<void> prepare(checkpoint_storage* storage, checkpoint_id id, std::vector<task_id> tasks,
                                     std::shared_ptr<preparation> into, bool make_dir);
  static runtime::task<bool> wait_for(runtime::event* e);
  // The tasks of `p` that have not acknowledged (durable) or not reported written, "2, 5".
  static std::string missing_tasks(const pending_checkpoint& p, bool durable);
  // Waits, not cancellable, until `p` is done.
  static runtime::task<void> await_prepared(std::shared_ptr<preparation> p);
  // Step 3 (coordinator_commit.cpp): sets p.committed, or the verdict.
  runtime::task<void> commit(checkpoint_id id);
  runtime::task<io::result<void>> write_manifest(checkpoint_id id);
  runtime::task<bool> wait_durable(checkpoint_id id);  // true once every task acknowledged
  runtime::task<void> withdraw(checkpoint_id id);       // takes an aborted checkpoint's manifest back
  runtime::task<void> finish(checkpoint_id id);
  void record(const pending_checkpoint& p, const checkpoint_outcome& outcome);
  bool enough_participants() const;
  void assert_home() const;

  runtime::executor* home_;
  checkpoint_storage* storage_;
  coordinator_options options_;
  std::map<task_id, participant_entry> participants_;
  std::map<checkpoint_id, pending_checkpoint> pending_;  // nodes are stable; erased by finish() only
  checkpoint_id next_id_;
  checkpoint_id reserved_up_to_ = 0;  // with reserve_ids: ids up to this one may be used
  checkpoint_id last_completed_id_ = no_checkpoint;
  std::deque<checkpoint_stats> history_;
  std::optional<checkpoint_stats> last_completed_;
  std::uint64_t completed_count_ = 0;
  std::uint64_t aborted_count_ = 0;
  std::chrono::steady_clock::time_point last_trigger_at_{};
  std::optional<std::chrono::steady_clock::time_point> last_end_at_;
  std::size_t forced_waiting_ = 0;  // trigger_now calls waiting for a slot (they go first)
  runtime::event slot_free_;        // set whenever a checkpoint ends or stop() begins
  runtime::semaphore commit_slot_{1};
  runtime::scope scope_;            // the trigger loop, every run_checkpoint and the preparation ahead
  struct prepared_ahead {           // chk-<id>/ made and prepared before its trigger (prepare_ahead)
    checkpoint_id id = no_checkpoint;
    std::vector<task_id> tasks;     // the tasks it was prepared for, in order
    std::shared_ptr<preparation> prepared;
  };
  std::optional<prepared_ahead> ahead_;
  std::size_t active_calls_ = 0;    // trigger_now calls in progress (stop() waits for them)
  runtime::event calls_done_;
  runtime::event stopped_;
  bool started_ = false;
  bool stopping_ = false;
  bool periodic_stopped_ = false;  // stop_periodic()
};

}  // namespace sluice::snapshot
