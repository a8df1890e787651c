#pragma once
// attempt_link: dataflow::cluster_link over etcd, for one attempt of one worker (worker.hpp).
//
// Messages are keys under `<prefix>a/<attempt>/`, written with plain puts and read back, in
// revision order, through one watch of the job's whole prefix (which also sees members and the
// leader leave, and a newer attempt start):
//   t/<id>          leader -> followers: trigger checkpoint <id> at your sources ({mode, alignment})
//   c/<id>          leader -> followers: checkpoint <id> completed (sinks commit)
//   x/<id>          leader -> followers: checkpoint <id> aborted ({reason, detail})
//   k/<id>/<task>   follower -> leader: <task> acknowledged <id> (its stats and state file)
//   d/<id>/<task>   follower -> leader: <task> declined <id>
//   e/<task>        follower -> leader: <task> passed its last record
//   f               leader -> followers: the final checkpoint completed; end your sources
//   F/<worker>      any -> all: <worker>'s attempt failed (the reason)
//   ready/<worker>  any -> all: <worker>'s data port listens and serves its partitions
//   done/<worker>   any -> leader: <worker>'s tasks ended the job (cluster/src/job_end.cpp)
//   left/<worker>   any -> all: <worker> is out of this attempt (the reason, if it failed); without
//                   a done/ first, the attempt ends everywhere
// The leader's coordinator sees the other workers' tasks as remote participants whose calls become
// t/, c/ and x/ keys (one per checkpoint, whichever task's call comes first); a follower's link
// turns those keys back into posts to its own tasks, in the order the leader wrote them.
//
// Lives on executor 0 of the worker's engine, with the etcd client; acknowledge/decline may be
// called from any executor (they post here).

#include "attempt_record.hpp"
#include "keys.hpp"

#include <sluice/dataflow/cluster_link.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/etcd/client.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/scope.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sluice::cluster::detail {

struct link_settings {
  const keys* where = nullptr;
  unsigned worker = 0;
  io::address listen;
  std::string job_name;
  std::vector<std::byte> secret;
  // A data connection whose peer went silent ends after this (transport_options::dead_peer_timeout).
  std::chrono::milliseconds dead_peer_timeout{0};
};

class attempt_link final : public dataflow::cluster_link, public snapshot::checkpoint_acknowledger {
 public:
  attempt_link(etcd::client& etcd, runtime::executor& home, const dataflow::job_plan& plan, attempt_record attempt,
               std::int64_t watch_from, link_settings settings);
  ~attempt_link() override;

  // The watch loop: runs until stop() (spawn it in a scope on home).
  runtime::task<void> run();
  // Ends the attempt here with `why` (the worker lost its lease, say).
  void end(std::string why);
  // Ends the watch, and waits for the messages still to be written; with `abandon` (the attempt
  // failed), drops them instead: an unreachable etcd must not hold a failed attempt up.
  runtime::task<void> stop(bool abandon);

  // cluster_link
  unsigned workers() const noexcept override { return static_cast<unsigned>(attempt_.ports.size()); }
  unsigned worker() const noexcept override { return settings_.worker; }
  bool leader() const noexcept override { return attempt_.leader == settings_.worker; }
  io::address listen() const override { return settings_.listen; }
  std::vector<io::address> peers() const override;
  buffers::transport_options transport() const override;
  snapshot::checkpoint_id newest_allowed() const override { return attempt_.newest_allowed; }
  snapshot::checkpoint_id first_free_id() const override { return attempt_.first_free_id; }
  runtime::task<void> ports_ready() override;
  runtime::task<io::result<void>> reserve_ids(snapshot::checkpoint_id up_to) override;
  runtime::task<io::result<void>> publish(snapshot::checkpoint_id id) override;
  std::vector<snapshot::checkpoint_participant*> remote_tasks(snapshot::checkpoint_acknowledger& coordinator) override;
  runtime::task<void> all_data_ended() override;
  void finish() override;
  snapshot::checkpoint_acknowledger& leader_acknowledger() override { return *this; }
  void attach_local(snapshot::checkpoint_participant& task) override { local_.push_back(&task); }
  void data_ended(snapshot::task_id task) override;
  runtime::task<void> finish_requested() override;
  void failed(std::string why) override;
  runtime::task<std::string> ended() override;

  // checkpoint_acknowledger (followers' tasks; any executor)
  void acknowledge(snapshot::task_id task, snapshot::checkpoint_id id, snapshot::task_checkpoint_stats stats) override;
  void decline(snapshot::task_id task, snapshot::checkpoint_id id, snapshot::abort_reason reason,
               std::string detail) override;

  // Follower: the checkpoints the leader said completed (c/) or aborted (x/) during this attempt.
  std::size_t completed_seen() const noexcept { return seen_completed_.size(); }
  std::size_t aborted_seen() const noexcept { return seen_aborted_.size(); }
  snapshot::checkpoint_id newest_completed_seen() const noexcept { return newest_completed_; }

  // What a remote participant's calls become (leader).
  void send_trigger(snapshot::checkpoint_id id, snapshot::checkpoint_mode mode, const snapshot::trigger_options& o);
  void send_complete(snapshot::checkpoint_id id);
  void send_abort(snapshot::checkpoint_id id, snapshot::abort_reason reason, std::string_view detail);

 private:
  class remote_task;
  std::string message_key(std::string_view suffix) const;
  void put(std::string key, std::string value);  // in the background, in call order, retried
  runtime::task<void> send_outbox();
  runtime::task<void> tidy(snapshot::checkpoint_id published, std::int64_t revision);
  void on_event(const etcd::watch_event& e);
  void on_message(std::string_view suffix, const std::string& value, bool deleted);
  void count_data_ended(snapshot::task_id task);

  etcd::client& etcd_;
  runtime::executor& home_;
  const dataflow::job_plan& plan_;
  attempt_record attempt_;
  std::int64_t watch_from_;
  link_settings settings_;
  snapshot::checkpoint_acknowledger* coordinator_ = nullptr;  // leader
  std::vector<std::unique_ptr<remote_task>> remote_;
  std::vector<snapshot::checkpoint_participant*> local_;
  std::set<snapshot::task_id> data_ended_;
  std::set<std::uint64_t> ready_;  // workers whose ports are up
  std::set<std::uint64_t> done_;   // workers whose tasks ended the job here (done/, before their left/)
  runtime::event all_ready_;
  snapshot::checkpoint_id triggered_ = 0;  // the newest id sent as t/ (and c/, x/ below)
  std::set<snapshot::checkpoint_id> completed_sent_;
  std::set<snapshot::checkpoint_id> aborted_sent_;
  std::set<snapshot::checkpoint_id> seen_completed_;  // follower
  std::set<snapshot::checkpoint_id> seen_aborted_;
  snapshot::checkpoint_id newest_completed_ = snapshot::no_checkpoint;
  std::int64_t last_publish_revision_ = 0;
  runtime::event all_data_ended_;
  runtime::event finish_;
  runtime::event ended_;
  std::string ended_why_;
  bool failed_here_ = false;  // failed() was called: this worker's tasks are going
  bool tasks_done_ = false;   // the runner stopped waiting in ended(): its tasks are going
  std::deque<std::pair<std::string, std::string>> outbox_;  // messages not yet written, in order
  bool sending_ = false;                                    // send_outbox runs
  runtime::scope scope_;  // background puts and tidying
  runtime::event stop_;
};

}  // namespace sluice::cluster::detail
