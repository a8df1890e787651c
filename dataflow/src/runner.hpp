#pragma once
// runner: one run of a job's tasks on an engine (run_job, job_runner.hpp), or one attempt of one
// worker's share of a job across workers (job_worker.hpp): makes and restores the tasks, wires
// their channels, runs the checkpoint coordinator (or, on a worker that is not the leader, hands
// its tasks to the leader's), takes the final checkpoint and tears everything down.

#include "channel_wiring.hpp"
#include "job_directories.hpp"
#include "job_history.hpp"
#include "job_metrics.hpp"
#include "stream_task.hpp"
#include "task_slot.hpp"

#include <sluice/buffers/segment.hpp>
#include <sluice/dataflow/cluster_link.hpp>
#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/host_calls.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/wait_report.hpp>
#include <sluice/snapshot/coordinator.hpp>
#include <sluice/snapshot/recovery_plan.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

// A record's encoding may exceed job_settings::max_record_bytes by this much (string lengths, keys,
// window starts), so a line of exactly the maximum still travels as a record.
constexpr std::size_t record_framing_bytes = 4096;

class runner final : public detail::task_listener, public rt::wait_reporter {
 public:
  // `link`: this run is one worker's attempt of a job across workers (cluster_link.hpp); else the
  // whole job runs here.
  runner(job_builder& job, job_settings settings, const job_plan& plan, rt::engine& eng, bf::network_memory& memory,
         job_fingerprint identity, cluster_link* link = nullptr)
      : job_(job), settings_(std::move(settings)), plan_(plan), engine_(eng), memory_(memory),
        identity_(std::move(identity)), link_(link) {}
  detail::job_directories* directories = nullptr;  // locked by run_job; claimed once recovery is planned
  // Called on executor 0 when the job is ready, before the host's job_settings::on_ready is posted
  // to the host lane (job_handle's).
  std::function<void(std::optional<ss::checkpoint_id>)> on_ready;

  // The run, then every host callback it posted has returned (host_calls.hpp).
  rt::task<job_result> run();
  // On executor 0, at any time (before the tasks run, it is kept until they do), runner_stop.cpp:
  // - now: the tasks stop where they are; the run ends with exit code 130 (resumable);
  // - drain: the sources stop producing, a checkpoint is taken, every task carries out its
  //   completion (the sinks publish), then the tasks stop; exit code 0, job_result::stopped_at.
  //   If the input ends first, the job finishes as usual. On a worker of a job across workers,
  //   drain stops as now does.
  void request_stop(stop_mode mode);
  // On executor 0: the job's progress now (job_handle::stats).
  rt::task<job_progress> sample_progress() { return progress(); }
  // Each task's line (stream_task::describe), for a hang report (wait_report.hpp).
  void report_waits(std::string& out) const override {
    for (const task_slot* slot : mine_) out += "  " + (slot->task ? slot->task->describe() : "task (not made)") + "\n";
  }

  void data_ended(ss::task_id id) override {
    if (link_ != nullptr) link_->data_ended(id);
    if (++data_ended_ == mine_.size()) all_data_ended_.set();
  }
  void task_ended(ss::task_id id, std::optional<std::string> failure) override {
    slots_[id].ended = true;
    ++tasks_ended_;
    if (!failure && final_checkpoint_done_ && !stopping_ && final_commit_missing(id, false)) {
      // Stopped (by another task's failure below) before it committed: exit 0 would be a lie.
      failure = "task " + slots_[id].task->name() + ": stopped before it committed the final checkpoint " +
                std::to_string(final_checkpoint_id_) + ", so its output is not published (the next run publishes it)";
    }
    if (failure && final_checkpoint_done_ && !final_commit_missing(id, true)) {
      // Everything is published and recovery would resume from the final checkpoint and change
      // nothing: the job is done; what failed while it wound down is worth a line only. Not so a
      // sink that failed before it committed the final checkpoint (its commit failed, say): its
      // output is not published, so the job fails, and the next run's recovery commits it.
      runtime::log::warn("job {}: after the final checkpoint: {}", job_.name(), *failure);
      failure.reset();
      // The others may wait for what the failed one would still have sent (its end of data), which
      // never comes: stop them, or the job never ends (the simulation found a reset connection
      // hanging a finished join: sluice simulate --job join --seeds 19-19 --faults net).
      tasks_scope_.request_stop();
    }
    if (failure && !failure_) {
      failure_ = std::move(failure);
      runtime::log::error("job {}: {}", job_.name(), *failure_);
      if (link_ != nullptr) link_->failed(*failure_);
      tasks_scope_.request_stop();
      all_data_ended_.set();  // wakes the controller, which sees the failure
    }
    if (tasks_ended_ == mine_.size()) all_ended_.set();
    if (awaited_commit_ != ss::no_checkpoint) commit_seen(id);  // an ended task commits nothing more
  }
  // Whether task `id` is a sink that has not committed the final checkpoint; `unknown` where its id
  // is not known (a follower's: the leader's checkpoint).
  bool final_commit_missing(ss::task_id id, bool unknown) const {
    const task_slot& slot = slots_[id];
    if (!slot.task || !slot.task->publishes()) return false;
    if (final_checkpoint_id_ == ss::no_checkpoint) return unknown;
    return slot.committed < final_checkpoint_id_;
  }
  void committed(ss::task_id id, ss::checkpoint_id checkpoint) override {
    if (id < slots_.size()) slots_[id].committed = std::max(slots_[id].committed, checkpoint);
    if (awaited_commit_ != ss::no_checkpoint && checkpoint >= awaited_commit_) commit_seen(id);
  }

 private:
  rt::task<job_result> run_tasks();
  rt::task<void> make_task(task_slot* slot, const ss::task_state* recovered);
  rt::task<void> restore_operators(task_slot* slot, std::optional<std::string>* problem);
  rt::task<std::optional<std::string>> restore_problem(const ss::recovery_plan& plan);
  rt::task<void> destroy(task_slot* slot);
  rt::task<void> controller();
  void checkpoint_ended(const ss::checkpoint_stats& stats);
  rt::task<void> finish_sources();
  rt::task<void> watch_link();  // the attempt ended elsewhere: stop
  ss::checkpoint_acknowledger& acknowledger();
  // runner_tasks.cpp: the scope's children, which fail the job rather than throw.
  rt::task<void> run_task(task_slot* slot);
  rt::task<void> run_helpers(task_slot* slot);
  rt::task<void> guarded(rt::task<void> body, const char* what);
  // Fails the job with `why` (the first failure wins; later ones are logged): the tasks are stopped
  // and the controller woken. An empty `why` says "out of memory" (its text could not be had).
  void fail_job(std::string why);
  static std::string what_of(std::exception_ptr thrown) noexcept;

 public:
  // Whether a task's parts, or channels not closed, still exist: destroying the runner now would
  // free what other executors use (run_parts ends the process instead when run() threw then).
  bool owns_parts() const noexcept;

 private:
  rt::task<void> sample(task_slot* slot, job_progress* p);
  rt::task<job_progress> progress();
  rt::task<void> report_progress();
  rt::task<void> wait_all_ended() { co_await all_ended_.wait(); }
  rt::task<void> drain();  // runner_stop.cpp
  rt::task<bool> take_drain_checkpoint();
  void commit_seen(ss::task_id id);
  void start_requested_stop();  // what request_stop kept until the tasks ran

  job_builder& job_;
  job_settings settings_;
  const job_plan& plan_;
  rt::engine& engine_;
  bf::network_memory& memory_;
  job_fingerprint identity_;  // job_fingerprint.hpp
  cluster_link* link_;
  bool coordinating() const noexcept { return link_ == nullptr || link_->leader(); }
  // The tasks ended on their own, at the end of their data: no failure and no stop asked of them
  // (a drain, a stop now, a task failing after the final checkpoint).
  bool ended_by_data() const noexcept {
    const bool stop_asked = tasks_scope_.token() != nullptr && tasks_scope_.token()->stop_requested();
    return !failure_ && !stopping_ && !stopped_at_ && !stop_asked;
  }
  std::optional<ss::checkpoint_storage> storage_;
  std::optional<ss::coordinator> coordinator_;
  std::optional<detail::job_history> history_;  // the coordinating side's history file (job_history.hpp)
  std::vector<task_slot> slots_;  // by task id; only this worker's have an executor
  std::vector<task_slot*> mine_;  // this worker's
  std::optional<detail::channel_wiring> wiring_;
  bool wiring_closed_ = false;
  std::size_t data_ended_ = 0;
  std::size_t tasks_ended_ = 0;
  std::uint64_t buffer_violations_ = 0;  // counted by the pools of destroyed tasks
  std::string credit_violation_;         // the first gate whose credit identity failed at its end
  std::optional<std::string> failure_;
  unsigned failures_in_a_row_ = 0;  // checkpoints aborted since the last completed one
  bool final_checkpoint_done_ = false;
  ss::checkpoint_id final_checkpoint_id_ = ss::no_checkpoint;  // the leader's, once done
  bool final_checkpoint_started_ = false;
  // Stops asked for (request_stop): kept until the tasks run (tasks_running_).
  bool tasks_running_ = false;
  bool stopping_ = false;  // now
  bool draining_ = false;  // drain
  std::optional<ss::checkpoint_id> stopped_at_;      // the drain's checkpoint, once every task committed it
  ss::checkpoint_id awaited_commit_ = ss::no_checkpoint;  // the drain waits for every task's commit of it
  std::vector<bool> commit_pending_;                 // by position in mine_ (the drain's wait)
  std::size_t commits_pending_ = 0;
  rt::event commits_done_;
  rt::event all_data_ended_;
  rt::event all_ended_;
  rt::scope tasks_scope_;
  rt::scope link_scope_;
  std::unique_ptr<job_metrics> metrics_;  // job_settings::metrics_address (job_metrics.hpp)
  // The host's callbacks (job_settings::on_*) run here, off the executors: a host that does not keep
  // up (a paused terminal, a full sd_notify socket) slows its callbacks, never the job (invariant 5).
  // Inline under a simulation. Declared after settings_, whose callbacks it calls.
  rt::host_calls host_{settings_.simulation != nullptr};
  std::chrono::steady_clock::time_point started_{};
};

}  // namespace sluice::dataflow::detail
