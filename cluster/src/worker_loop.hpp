#pragma once
// worker_loop: one worker's life (worker.hpp), attempt after attempt, on executor 0 of its engine.
// Its parts live in three files:
// - membership.cpp: the lease and the member key (join, keep_alive), the leader key (campaign);
// - worker.cpp: the attempts (start_attempt on the leader, await_attempt on the others,
//   run_attempt) and the loop that runs them;
// - job_end.cpp: how the job ends everywhere, even for a worker killed in its last moments: each
//   worker marks `a/<n>/done/<w>` once its tasks of attempt n ended with the final checkpoint
//   committed, and the leader, once every worker of the attempt did, writes `finished` (fenced by
//   its epoch). Every worker exits 0 once it sees `finished`; a worker started after that exits 0
//   at once (or is refused, exit code 2, when its job differs from the finished one).

#include "attempt_link.hpp"
#include "attempt_record.hpp"
#include "keys.hpp"

#include <sluice/cluster/worker.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_worker.hpp>
#include <sluice/etcd/client.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace sluice::cluster::detail {

inline constexpr auto poll_interval = std::chrono::milliseconds(200);

class worker_loop {
 public:
  worker_loop(dataflow::job_worker& job, const dataflow::job_plan& plan, worker_options options,
              runtime::engine& eng);

  runtime::task<dataflow::job_result> run();

 private:
  // membership.cpp
  runtime::task<io::result<void>> join();               // lease + member key
  runtime::task<bool> revoke_if_dead_here(const etcd::txn_response& held);  // a dead predecessor's key
  runtime::task<void> keep_alive();                     // until stopped; flags lost_
  void lose_lease(std::string why, const std::string& line);
  runtime::task<io::result<void>> campaign();           // sets leader_, epoch_
  // worker.cpp
  runtime::task<std::optional<attempt_record>> start_attempt();  // leader
  runtime::task<std::optional<attempt_record>> await_attempt();  // follower
  runtime::task<dataflow::job_result> run_attempt(const attempt_record& a, std::int64_t watch_from);
  // job_end.cpp
  // The job finished (the `finished` record): sets finished_ (exit code 0, or 2 for another job).
  runtime::task<bool> finished_already();
  // This worker's tasks of attempt `a` ended with the final checkpoint committed: done/<w>.
  runtime::task<void> report_done(const attempt_record& a);
  // Leader: every worker of attempt `last` is done; writes `finished` and sets finished_.
  runtime::task<bool> finish_if_all_done(const attempt_record& last);
  // How `theirs` (an encoded fingerprint) differs from this worker's job, one clause per difference.
  std::string differences(const std::string& theirs) const;

  runtime::task<bool> pause(std::chrono::milliseconds d) { co_return co_await runtime::sleep_for(d); }
  dataflow::job_result refused(std::string why) { return {.exit_code = 2, .message = std::move(why)}; }

  dataflow::job_worker& job_;
  const dataflow::job_plan& plan_;
  worker_options options_;
  runtime::engine& engine_;
  keys keys_;
  etcd::client etcd_;
  etcd::client renewal_;  // the lease's renewals only: calls bounded by a third of the TTL
  std::int64_t lease_ = 0;
  std::int64_t member_revision_ = 0;
  bool lost_ = false;  // the lease is gone
  bool renewing_ = false;  // keep_alive runs
  attempt_link* link_ = nullptr;  // the running attempt's
  bool leader_ = false;
  std::int64_t epoch_ = 0;
  std::int64_t attempt_revision_ = 0;  // mod revision of the attempt key we run
  std::uint64_t last_attempt_ = 0;
  std::uint64_t passed_over_ = 0;  // an attempt of an ended epoch that listed this worker: left/ written
  std::optional<dataflow::job_result> refusal_;
  std::optional<dataflow::job_result> completed_;  // this worker's last attempt that ended the job
  std::optional<dataflow::job_result> finished_;   // the job is over: what run() returns
  runtime::scope background_;
};

}  // namespace sluice::cluster::detail
