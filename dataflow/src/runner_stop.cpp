// runner (runner.hpp): a stop asked for while the job runs, now or with a final checkpoint (drain).
//
// The drain, on executor 0:
//   1. every source is paused (stream_task::pause_input): it produces no more records, but still
//      takes part in checkpoints, so what it produced is all the checkpoint covers;
//   2. a checkpoint is triggered at once (tried 5 times, as the final checkpoint of a finished job);
//   3. once it completed, the runner waits until every task has carried out its completion (the
//      sinks published what they staged for it: task_listener::committed), so the output is whole
//      when the job ends, not only after the next run's recovery;
//   4. the tasks are stopped; the run ends with exit code 0 and job_result::stopped_at.
// The next run resumes from that checkpoint: the sources go on from where they were paused, and
// nothing is published twice (invariant: a sink publishes only what a completed checkpoint covers).
// If every task's data ended first, the job's own final checkpoint ends it (controller()), and a drain
// asked for then does nothing more.

#include "runner.hpp"

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/executor.hpp>

#include <fmt/core.h>

namespace sluice::dataflow::detail {

void runner::request_stop(stop_mode mode) {
  if (!stopping_ && !draining_ && settings_.on_stopping) host_.post([this, mode] { settings_.on_stopping(mode); });
  if (mode == stop_mode::now) {
    if (stopping_) return;
    stopping_ = true;
    if (!tasks_running_) return;  // run() checks before the tasks start
    runtime::log::info("job {}: stopping now", job_.name());
    tasks_scope_.request_stop();
    all_data_ended_.set();  // wakes the controller, which sees the stop
    return;
  }
  if (draining_ || stopping_) return;
  draining_ = true;
  if (tasks_running_) start_requested_stop();
}

// Called by run() once the tasks run, and by request_stop after that.
void runner::start_requested_stop() {
  if (stopping_) {
    stopping_ = false;  // (request_stop(now) again, now that the tasks run)
    request_stop(stop_mode::now);
    return;
  }
  if (!draining_) return;
  if (link_ != nullptr) {
    // A worker of a job across workers: the checkpoint is the leader's; stop as now does.
    runtime::log::warn("job {}: a drain stops a worker of a job across workers at once", job_.name());
    draining_ = false;
    request_stop(stop_mode::now);
    return;
  }
  if (final_checkpoint_started_ || failure_) {
    runtime::log::info("job {}: the job is already ending; the drain waits for its end", job_.name());
    return;
  }
  tasks_scope_.spawn(drain());
}

rt::task<bool> runner::take_drain_checkpoint() {
  coordinator_->stop_periodic();  // the drain's checkpoint is the last
  for (int attempt = 1;; ++attempt) {
    ss::checkpoint_outcome outcome = co_await coordinator_->trigger_now();
    if (outcome.completed()) co_return true;
    if (failure_ || stopping_ || outcome.reason == ss::abort_reason::cancelled) co_return false;
    if (attempt == 5) {
      runtime::log::error("job {}: the drain's checkpoint failed 5 times, last: {} ({}); stopping without it",
                          job_.name(), ss::to_string(outcome.reason), outcome.detail);
      co_return false;
    }
    runtime::log::warn("job {}: the drain's checkpoint aborted ({}: {}); retrying", job_.name(),
                       ss::to_string(outcome.reason), outcome.detail);
    const bool waited = co_await rt::sleep_for(std::chrono::milliseconds(50 << (attempt - 1)));
    if (!waited) co_return false;
  }
}

rt::task<void> runner::drain() {
  runtime::log::info("job {}: draining: the sources stop, then a final checkpoint", job_.name());
  for (task_slot* slot : mine_) {
    if (slot->task->is_source()) {
      stream_task* t = slot->task.get();
      slot->executor->post([t] { t->pause_input(); });
    }
  }
  // The tasks' registrations are posts to this executor: a drain asked for before the tasks ran
  // waits for them to land (a trigger before would abort: no task is registered).
  for (int i = 0; i < 1000 && coordinator_->participants() < mine_.size(); ++i) co_await rt::yield_to_io();
  const bool taken = co_await take_drain_checkpoint();
  if (!taken) {
    if (!failure_) request_stop(stop_mode::now);
    co_return;
  }
  const std::optional<ss::checkpoint_stats> last = coordinator_->last_completed();
  const ss::checkpoint_id id = last ? last->id : ss::no_checkpoint;
  // Every task carries out the completion it was posted (or has ended).
  awaited_commit_ = id;
  commit_pending_.assign(mine_.size(), true);
  commits_pending_ = mine_.size();
  for (std::size_t i = 0; i < mine_.size(); ++i) {
    // (A task may have carried it out before this resumed: the completion is posted to it first.)
    if (mine_[i]->ended || mine_[i]->committed >= id) commit_seen(mine_[i]->id);
  }
  bool all = true;
  if (commits_pending_ > 0) all = co_await commits_done_.wait();
  if (!all || failure_) co_return;  // stopped meanwhile, or a sink's commit failed (the job fails)
  stopped_at_ = id;
  runtime::log::info("job {}: drained: checkpoint {} taken and published; stopping", job_.name(), id);
  tasks_scope_.request_stop();
  all_data_ended_.set();  // wakes the controller, which sees the drain
}

void runner::commit_seen(ss::task_id id) {
  for (std::size_t i = 0; i < mine_.size(); ++i) {
    if (mine_[i]->id != id || i >= commit_pending_.size() || !commit_pending_[i]) continue;
    commit_pending_[i] = false;
    if (--commits_pending_ == 0) commits_done_.set();
  }
}

}  // namespace sluice::dataflow::detail
