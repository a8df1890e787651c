#pragma once
// job_worker: one worker's share of a job spread over several worker processes, run attempt by
// attempt on the caller's engine (the cluster module drives it: cluster/worker.hpp).
//
// - prepare(), before the engine runs anything of the job: checks the settings and the graph
//   (std::invalid_argument), computes the job's identity (job_fingerprint.hpp: it reads every
//   input, which every worker must reach), and locks this worker's share of the checkpoint
//   directory (`.sluice-lock.worker-<index>`: the workers share it, two instances of one worker do
//   not). A refusal is a job_result with exit code 2.
// - run_attempt(): one attempt (cluster_link.hpp): this worker's tasks of the job plan (job_plan.hpp,
//   W workers), restored from the newest checkpoint up to link.newest_allowed(), wired to the other
//   workers through its data port, until the job ends (exit code 0: the final checkpoint completed
//   and every task ended), fails here (1), or ends elsewhere (1, with link.ended()'s reason).
//   Output directories are locked (per worker) and claimed at the first attempt.
// Everything of the attempt is gone when run_attempt returns (its network memory included).

#include <sluice/dataflow/cluster_link.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/task.hpp>

#include <memory>
#include <variant>

namespace sluice::dataflow {

class job_worker {
 public:
  static std::variant<std::unique_ptr<job_worker>, job_result> prepare(job_builder& job, job_settings settings,
                                                                       unsigned workers, unsigned worker);
  ~job_worker();
  job_worker(const job_worker&) = delete;
  job_worker& operator=(const job_worker&) = delete;

  const job_fingerprint& identity() const noexcept;
  const job_settings& settings() const noexcept;
  // On executor 0 of `eng`, which has settings().executors executors.
  runtime::task<job_result> run_attempt(runtime::engine& eng, cluster_link& link);

 private:
  struct impl;
  explicit job_worker(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::dataflow
