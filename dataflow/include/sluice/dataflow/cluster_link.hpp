#pragma once
// cluster_link: what one worker's attempt of a job spread over several workers needs from the
// coordination between them (the cluster module implements it over etcd: cluster/worker.hpp).
//
// A job across W workers runs as attempts: every worker runs its own tasks of the same job plan
// (job_plan.hpp, the tasks placed on its index), wired to the others' over its data port. Exactly
// one worker is the leader: its checkpoint coordinator drives every task of the job, its own
// directly and the others' through remote participants; the other workers' tasks acknowledge to
// it through leader_acknowledger(). A checkpoint completes once its manifest is durable AND it was
// published (publish()); recovery goes no further than the latest published one
// (newest_allowed()). Any failure of any worker, and any worker leaving, ends the attempt on every
// worker (ended()), and the job restarts from the latest published checkpoint.
//
// Threading: every call is made on executor 0 of the engine the attempt runs on, which is where
// the link lives too; the participants and the acknowledger it hands out follow
// checkpoint_participant.hpp's rules (calls posted to their home executor).

#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/io/address.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>

#include <optional>
#include <string>
#include <vector>

namespace sluice::dataflow {

class cluster_link {
 public:
  virtual ~cluster_link() = default;

  // --- the attempt, fixed while it runs ---------------------------------------------------------
  virtual unsigned workers() const noexcept = 0;
  virtual unsigned worker() const noexcept = 0;  // this worker's index
  virtual bool leader() const noexcept = 0;
  virtual io::address listen() const = 0;                 // this worker's data port
  virtual std::vector<io::address> peers() const = 0;     // every worker's data port, by index
  virtual buffers::transport_options transport() const = 0;  // job name, epoch, node id, secret
  // Recovery goes no further than this checkpoint (the latest published one; max_checkpoint_id if
  // the job never ran across workers, no_checkpoint if it did but nothing completed yet).
  virtual snapshot::checkpoint_id newest_allowed() const = 0;
  // No checkpoint of this job used an id below this one (the reserved ids' counter).
  virtual snapshot::checkpoint_id first_free_id() const = 0;
  // Once this worker's data port listens and serves its partitions: resolves once every worker's
  // does (so no worker dials a port not yet open), or when the attempt ends (ended()).
  virtual runtime::task<void> ports_ready() = 0;

  // --- the leader's coordinator ----------------------------------------------------------------
  virtual runtime::task<io::result<void>> reserve_ids(snapshot::checkpoint_id up_to) = 0;
  virtual runtime::task<io::result<void>> publish(snapshot::checkpoint_id id) = 0;
  // A participant for every task of the other workers; their acknowledgements reach `coordinator`.
  virtual std::vector<snapshot::checkpoint_participant*> remote_tasks(snapshot::checkpoint_acknowledger& coordinator) = 0;
  // Every task of every worker passed its last record (the final checkpoint may be taken).
  virtual runtime::task<void> all_data_ended() = 0;
  // The final checkpoint completed: every worker's sources may end their partitions.
  virtual void finish() = 0;

  // --- every worker ----------------------------------------------------------------------------
  // Followers: where this worker's tasks acknowledge (the leader's coordinator), and how the
  // leader's triggers and notifications reach them.
  virtual snapshot::checkpoint_acknowledger& leader_acknowledger() = 0;
  virtual void attach_local(snapshot::checkpoint_participant& task) = 0;
  virtual void data_ended(snapshot::task_id task) = 0;
  // Followers: the leader said finish (its final checkpoint completed).
  virtual runtime::task<void> finish_requested() = 0;
  // This worker's attempt failed (a task failed): every worker restarts.
  virtual void failed(std::string why) = 0;
  // Resolves with the reason once the attempt ends because of another worker (it failed or left,
  // or this worker lost its place); not before.
  virtual runtime::task<std::string> ended() = 0;
};

}  // namespace sluice::dataflow
