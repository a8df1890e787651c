#pragma once
// A job in the host's own engine: for a daemon that runs its own coroutines (a server, a control
// loop) on a sluice engine and runs a job beside them.
//
//   runtime::engine eng({.executors = 2, .handle_signals = false});   // the host's
//   dataflow::job_handle job = dataflow::start_job(eng, graph, settings);
//   ... on one of eng's executors:
//   std::optional<dataflow::job_ready> up = co_await job.ready();     // restored, running
//   job.stop(dataflow::stop_mode::drain);                            // from any thread
//   dataflow::job_result r = co_await job.wait();                    // or job.join() off the engine
//
// - Placement, directories, checkpoints, refusals and results are run_job's (job_runner.hpp); the
//   tasks run on executors 0 .. settings.executors-1 of `eng` (more than it has is refused), the
//   job's own control work on executor 0. The blocking start-up work (reading the inputs for the
//   job's fingerprint, locking the directories) runs on the engine's blocking-work pool, so the
//   host's coroutines keep running while a job starts.
// - Signals are the host's: the job never reads them (settings.handle_signals must be false). The
//   host decides what SIGTERM means and calls stop(stop_mode::drain) or stop(stop_mode::now).
// - settings.stop and settings.drain work here too; settings.log_sink is installed (process-wide,
//   runtime/log.hpp) from the start to the end of the job.
// - Lifetime: the handle may be copied and dropped at any time (the job runs on); `job` and `eng`
//   must outlive the job's end (wait(), join()). Stop the engine only after the job ended, or the
//   job ends as stopped (exit code 130) when the engine's executors stop.

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/task.hpp>

#include <memory>
#include <optional>

namespace sluice::dataflow {

class job_handle;
namespace detail {
struct job_state;
// start_job without the checks of what only a host's engine refuses (handle_signals, a
// simulation): run_job starts its job in an engine of its own through it.
job_handle start_job_on(runtime::engine& eng, job_builder& job, job_settings settings);
}  // namespace detail

// The job is restored, its channels are connected, and its tasks are about to run.
struct job_ready {
  std::optional<snapshot::checkpoint_id> resumed_from;  // empty: a fresh start
};

class job_handle {
 public:
  job_handle() = default;  // no job
  bool valid() const noexcept { return state_ != nullptr; }

  // Any thread, any time, more than once: `now` also ends a drain in progress. A stop asked for
  // before the job is ready is kept until it is (now: the job ends before its tasks run).
  void stop(stop_mode mode) const;

  // On one of the engine's executors. Resolves once the job is ready, or empty if it ended first
  // (wait() says how) or the awaiting task was stopped.
  runtime::task<std::optional<job_ready>> ready() const;
  // On one of the engine's executors: the job's result, once it ended. Not ended by a stop of the
  // awaiting task (the job's end is what it waits for). Rethrows what the job threw (a stage that
  // cannot be built: std::invalid_argument), as join() does.
  runtime::task<job_result> wait() const;
  // On one of the engine's executors: the job's progress now (once ended: its final progress).
  runtime::task<job_progress> stats() const;
  // Off the engine (a thread that is none of its executors): blocks until the job ended.
  job_result join() const;

 private:
  friend job_handle detail::start_job_on(runtime::engine& eng, job_builder& job, job_settings settings);
  explicit job_handle(std::shared_ptr<detail::job_state> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::job_state> state_;
};

// Starts `job` in `eng` and returns at once (any thread). Throws std::invalid_argument as run_job
// does, and for settings.executors above eng.size(), handle_signals, or a simulation.
job_handle start_job(runtime::engine& eng, job_builder& job, job_settings settings);

// The same, awaited: co_await run_job_in(eng, job, settings) on one of eng's executors ends with
// the job (stop it through settings.stop or settings.drain).
runtime::task<job_result> run_job_in(runtime::engine& eng, job_builder& job, job_settings settings);

}  // namespace sluice::dataflow
