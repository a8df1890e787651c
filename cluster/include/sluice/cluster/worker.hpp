#pragma once
// run_worker: one worker process of a job spread over several processes and hosts, coordinated
// through etcd (docs/cluster.md).
//
// Every worker runs the same job (same arguments) with its own index. Through etcd (its JSON
// gateway, etcd/client.hpp) the workers:
// - join: each holds a lease (lease_ttl; renewed every third of it) and, under it, the key
//   `<prefix>member/<index>` (its data port's advertised address and the job's identity). A
//   second process with the same index is refused (exit code 2), and so is a worker whose job
//   differs from the leader's (other arguments).
// - elect a leader: `<prefix>leader`, created under the lease by a transaction that succeeds only if
//   the key is missing. The leader's epoch is that key's create revision. The leader coordinates
//   checkpoints for every task of the job.
// - run attempts: once every worker is a member and every worker has left the previous attempt,
//   the leader writes `<prefix>attempt` (its number, the epoch, the members and their ports, how
//   far recovery may go, the first free checkpoint id), fenced by the epoch. Every member listed
//   runs its tasks of the attempt (dataflow/job_worker.hpp); the attempt's messages (triggers,
//   acknowledgements, notifications, end of data, failures) are keys under `<prefix>a/<number>/`,
//   read through one watch.
// - commit checkpoints: the leader reserves checkpoint ids (`<prefix>next-id`) and, once a
//   manifest is durable in the shared checkpoint directory, publishes it (`<prefix>pointer`), both
//   by transactions that also compare the epoch: a stale leader can neither reuse an id nor
//   complete a checkpoint. History is compacted as the pointer advances.
// - fail over: a worker that fails, leaves (its lease expired: kill -9, a hung process, a
//   partition) or loses its lease ends the attempt everywhere; the next attempt restarts the whole
//   job from the latest published checkpoint once every worker is back. A leader that goes is
//   replaced by whichever worker creates the key next.
//
// Returns the job's result: exit code 0 once the job finished, 1 once it failed `max_failures`
// attempts in a row, 2 for a refusal, 130 when stopped (SIGINT/SIGTERM or settings.stop).

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/io/address.hpp>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace sluice::cluster {

struct worker_options {
  std::string endpoint;    // etcd: http://HOST:PORT or unix:///PATH
  std::string job_name;    // the job's keys live under /sluice/<job_name>/
  unsigned workers = 1;
  unsigned index = 0;
  io::address listen;      // this worker's data port
  io::address advertise;   // how the others reach it (default: listen)
  std::vector<std::byte> secret;  // the data port's shared secret (empty: none)
  std::chrono::seconds lease_ttl{3};
  unsigned max_failures = 8;  // failed attempts in a row before the job fails for good
};

dataflow::job_result run_worker(dataflow::job_builder& job, dataflow::job_settings settings, worker_options options);

}  // namespace sluice::cluster
