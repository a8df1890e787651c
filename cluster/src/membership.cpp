// See worker_loop.hpp: membership (the lease, the member key) and the leader key.

#include "worker_loop.hpp"

#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/core.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>

namespace sluice::cluster::detail {

namespace rt = sluice::runtime;

namespace {

// Every connection to etcd (the watch's included) gives up on a silent path after two TTLs, as the
// data connections do (worker.cpp).
etcd::client_options attempt_options(std::chrono::seconds ttl) {
  etcd::client_options o;
  o.dead_peer_timeout = std::max(std::chrono::milliseconds(2000), 2 * std::chrono::milliseconds(ttl));
  return o;
}

etcd::client_options renewal_options(std::chrono::seconds ttl) {
  etcd::client_options o = attempt_options(ttl);
  o.request_timeout = std::max(std::chrono::milliseconds(300), std::chrono::duration_cast<std::chrono::milliseconds>(ttl) / 3);
  return o;
}

}  // namespace

worker_loop::worker_loop(dataflow::job_worker& job, const dataflow::job_plan& plan, worker_options options,
                         rt::engine& eng)
    : job_(job), plan_(plan), options_(std::move(options)), engine_(eng), keys_(options_.job_name),
      etcd_(etcd::endpoint::parse(options_.endpoint).value(), attempt_options(options_.lease_ttl)),
      renewal_(etcd::endpoint::parse(options_.endpoint).value(), renewal_options(options_.lease_ttl)) {}

rt::task<io::result<void>> worker_loop::join() {
  if (lost_ && lease_ != 0) {
    // Presumed lost, maybe not gone (etcd was unreachable, not this lease's end: an etcd restarted
    // renews every lease). Gone now, and with it this worker's member key and, if it led, the
    // leader key: otherwise its own old key would refuse it below. Best effort: it may be gone.
    io::result<void> revoked = co_await etcd_.lease_revoke(lease_);
    if (revoked) {
      rt::log::info("cluster: worker {} gave up its old lease {:x}, which etcd still held", options_.index, lease_);
    } else if (revoked.error().code() != etcd::make_error_code(etcd::grpc_code::not_found)) {
      co_return revoked.error();  // etcd unreachable still: try again later
    }
  }
  io::result<etcd::lease> lease = co_await etcd_.lease_grant(options_.lease_ttl.count());
  if (!lease) co_return lease.error();
  lease_ = lease->id;
  lost_ = false;
  if (!renewing_) {  // renewed from now on, also while the index is still held below
    renewing_ = true;
    background_.spawn(keep_alive());
  }
  member_record me{fmt::format("{}", options_.advertise.to_string()), static_cast<long>(::getpid()),
                   dataflow::encode_fingerprint(job_.identity())};
  const std::string key = keys_.member(options_.index);
  // A worker killed a moment ago still holds its key until its lease runs out (lease_ttl): wait
  // that long. A live one renews it and keeps it.
  const auto deadline = engine_.at(0).now() + 2 * options_.lease_ttl + std::chrono::seconds(1);
  io::result<etcd::txn_response> r = io::error(std::make_error_code(std::errc::timed_out), "not tried");
  for (bool logged = false;; logged = true) {
    std::vector<etcd::compare> missing{etcd::compare::missing(key)};
    std::vector<etcd::op> put{etcd::op::put(key, me.encode(), lease_)};
    std::vector<etcd::op> read{etcd::op::range(key)};
    r = co_await etcd_.txn(std::move(missing), std::move(put), std::move(read));
    if (!r) co_return r.error();
    if (r->succeeded || engine_.at(0).now() >= deadline) break;
    const bool revoked = co_await revoke_if_dead_here(*r);
    if (revoked) continue;
    if (!logged) rt::log::info("cluster: worker {}'s key is still held; waiting for its lease to end", options_.index);
    const bool slept = co_await pause(poll_interval);
    if (!slept) co_return io::error(std::make_error_code(std::errc::operation_canceled), "stopped");
  }
  if (!r->succeeded) {
    std::string holder = "another process";
    if (!r->ranges.empty() && !r->ranges[0].empty()) {
      if (auto other = member_record::decode(r->ranges[0][0].value)) holder = fmt::format("pid {} at {}", other->pid, other->port);
    }
    refusal_ = refused(fmt::format("worker {} of job '{}' is already running ({}): each worker index runs once",
                                   options_.index, options_.job_name, holder));
    co_return io::error(std::make_error_code(std::errc::device_or_resource_busy), refusal_->message);
  }
  member_revision_ = r->revision;
  rt::log::info("cluster: worker {} of job '{}' joined (lease {:x}, data port {})", options_.index, options_.job_name,
                lease_, options_.advertise.to_string());
  co_return io::result<void>{};
}

// The key is held by a predecessor that died on this host: it advertised this worker's own data
// port, and its pid is gone here. (It ran on this host: its address is this worker's. It was not
// a live second instance: that one would hold the per-worker lock on the checkpoint directory,
// which this process holds since job_worker::prepare.) Its lease is revoked rather than waited
// for, so a worker restarted on the same host rejoins at once instead of after a whole TTL.
rt::task<bool> worker_loop::revoke_if_dead_here(const etcd::txn_response& held) {
  if (held.ranges.empty() || held.ranges[0].empty()) co_return false;
  const etcd::key_value& kv = held.ranges[0][0];
  const std::optional<member_record> other = member_record::decode(kv.value);
  if (!other || kv.lease == 0 || kv.lease == lease_ || other->port != options_.advertise.to_string() ||
      other->pid <= 0 || other->pid == static_cast<long>(::getpid())) {
    co_return false;
  }
  if (::kill(static_cast<pid_t>(other->pid), 0) == 0 || errno != ESRCH) co_return false;  // (alive, or not ours to ask)
  io::result<void> revoked = co_await etcd_.lease_revoke(kv.lease);
  if (!revoked && revoked.error().code() != etcd::make_error_code(etcd::grpc_code::not_found)) co_return false;
  rt::log::info("cluster: worker {}'s key was held by pid {} at {}, which is gone from this host: its lease {:x} is "
                "revoked",
                options_.index, other->pid, other->port, kv.lease);
  co_return true;
}

// Renews the lease every third of its TTL, on a connection of its own (renewal_) whose calls are
// bounded by that third, so a renewal neither waits behind the attempt's requests nor hangs on a
// silent network. The lease is presumed gone once no renewal succeeded for a whole TTL, counted
// from the last successful renewal's request: etcd cannot have expired it any earlier, and the
// others may see it gone from then on. The worker then stops its tasks (it ends the attempt) and
// rejoins with a new lease. A partitioned worker thus stops on its own, within the TTL, instead of
// running on until it can reach etcd again.
rt::task<void> worker_loop::keep_alive() {
  using ms = std::chrono::milliseconds;
  const auto ttl = std::chrono::duration_cast<ms>(options_.lease_ttl);
  const auto every = ttl / 3;
  bool warned = false;
  auto renewed = engine_.at(0).now();  // join() granted it just now
  auto next = renewed + every;
  std::int64_t renewing = lease_;
  for (;;) {
    // Until the next renewal, or the moment the lease is presumed gone if that comes first (once
    // lost, until the rejoin's new lease).
    const auto now = engine_.at(0).now();
    const auto wake = lost_ ? now + every : std::min(next, renewed + ttl);
    if (wake > now) {
      const bool slept = co_await rt::sleep_for(std::chrono::duration_cast<ms>(wake - now));
      if (!slept) co_return;
    }
    if (lost_) continue;
    if (lease_ != renewing) {  // a new lease (after a rejoin)
      renewing = lease_;
      renewed = engine_.at(0).now();
      next = renewed + every;
      warned = false;
      continue;
    }
    const auto asked = engine_.at(0).now();
    const auto left = std::chrono::duration_cast<ms>(renewed + ttl - asked);
    std::optional<io::result<std::int64_t>> ttl_left;
    if (left > ms(0)) ttl_left = co_await rt::with_timeout(renewal_.lease_keepalive(lease_), left);
    if (lost_ || lease_ != renewing) continue;
    if (ttl_left && *ttl_left) {
      if (warned) rt::log::info("cluster: etcd answers again; worker {} kept its lease", options_.index);
      warned = false;
      renewed = asked;
      next = asked + every;
      continue;
    }
    if (ttl_left && ttl_left->error().code() == etcd::make_error_code(etcd::errc::lease_expired)) {
      lose_lease("this worker's lease expired (it was cut off from etcd)",
                 fmt::format("cluster: worker {}'s lease expired: it lost its place in the job and rejoins",
                             options_.index));
      continue;
    }
    const std::string cause = ttl_left ? ttl_left->error().message() : std::string("no answer");
    const auto silent = std::chrono::duration_cast<ms>(engine_.at(0).now() - renewed);
    if (silent >= ttl) {
      lose_lease(fmt::format("this worker could not renew its lease for {} ms", silent.count()),
                 fmt::format("cluster: worker {} could not renew its lease for {} ms ({}): it presumes the lease "
                             "expired, so it lost its place in the job: it stops its tasks and rejoins",
                             options_.index, silent.count(), cause));
      continue;
    }
    if (!warned) {
      rt::log::warn("cluster: renewing the lease: {}; the job goes on, checkpoints cannot complete meanwhile; "
                    "the lease is presumed lost in {} ms",
                    cause, (ttl - silent).count());
    }
    warned = true;
    next = engine_.at(0).now() + std::min(every, ms(250));  // soon again: the lease is running out
  }
}

void worker_loop::lose_lease(std::string why, const std::string& line) {
  rt::log::error("{}", line);
  lost_ = true;
  if (link_ != nullptr) link_->end(std::move(why));
}

rt::task<io::result<void>> worker_loop::campaign() {
  for (;;) {
    std::vector<etcd::compare> missing{etcd::compare::missing(keys_.leader())};
    std::vector<etcd::op> take{etcd::op::put(keys_.leader(), std::to_string(options_.index), lease_)};
    std::vector<etcd::op> read{etcd::op::range(keys_.leader())};
    io::result<etcd::txn_response> r = co_await etcd_.txn(std::move(missing), std::move(take), std::move(read));
    if (!r) co_return r.error();
    if (r->succeeded) {
      leader_ = true;
      epoch_ = r->revision;
      rt::log::info("cluster: worker {} leads job '{}' (epoch {})", options_.index, options_.job_name, epoch_);
      co_return io::result<void>{};
    }
    if (!r->ranges.empty() && !r->ranges[0].empty()) {
      const etcd::key_value& kv = r->ranges[0][0];
      const bool led = leader_;
      leader_ = kv.value == std::to_string(options_.index) && kv.lease == lease_;
      if (led && !leader_ && kv.create_revision != epoch_) {
        rt::log::warn("cluster: worker {} led epoch {}, which is over: worker {} leads now (epoch {}); it steps down "
                      "and follows",
                      options_.index, epoch_, kv.value, kv.create_revision);
      }
      epoch_ = kv.create_revision;
      co_return io::result<void>{};
    }
    // (the leader key went between the compare and the read: try again)
  }
}

}  // namespace sluice::cluster::detail
