// See worker_loop.hpp: the attempts, and the loop that runs them; and run_worker (worker.hpp).

#include "worker_loop.hpp"

#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>

namespace sluice::cluster {

namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;

namespace detail {

// Every worker a member, none still in the previous attempt, and the same job everywhere.
rt::task<std::optional<attempt_record>> worker_loop::start_attempt() {
  const std::string mine = dataflow::encode_fingerprint(job_.identity());
  for (bool logged = false;; logged = true) {
    if (lost_) co_return std::nullopt;
    io::result<etcd::range_response> members = co_await etcd_.get_prefix(keys_.members());
    io::result<etcd::range_response> previous = co_await etcd_.get(keys_.attempt());
    if (members && previous) {
      std::map<unsigned, std::pair<member_record, std::int64_t>> by_index;
      for (const etcd::key_value& kv : members->kvs) {
        const std::string index = kv.key.substr(keys_.members().size());
        auto m = member_record::decode(kv.value);
        if (m && !index.empty() && std::all_of(index.begin(), index.end(), ::isdigit)) {
          by_index.emplace(static_cast<unsigned>(std::stoul(index)), std::pair{*m, kv.create_revision});
        }
      }
      std::optional<attempt_record> last;
      if (!previous->kvs.empty()) last = attempt_record::decode(previous->kvs[0].value);
      if (last) {  // the job ended there on every worker (job_end.cpp)
        const bool over = co_await finish_if_all_done(*last);
        if (over) co_return std::nullopt;
      }
      std::vector<unsigned> missing;
      for (unsigned w = 0; w < options_.workers; ++w) {
        if (!by_index.contains(w)) missing.push_back(w);
      }
      // Still in the previous attempt: listed there with the same member key, and no left/ yet.
      std::vector<unsigned> busy;
      if (last && missing.empty()) {
        for (unsigned w = 0; w < options_.workers && w < last->member_revisions.size(); ++w) {
          if (w == options_.index || by_index[w].second != last->member_revisions[w]) continue;
          io::result<etcd::range_response> left = co_await etcd_.get(keys_.messages(last->number) + fmt::format("left/{}", w));
          if (!left || left->kvs.empty()) busy.push_back(w);
        }
      }
      bool same_job = true;
      for (auto& [w, m] : by_index) {
        if (m.first.fingerprint != mine && w < options_.workers) {
          rt::log::error("cluster: worker {} runs another job or other arguments than the leader; waiting for it to "
                         "be restarted right",
                         w);
          same_job = false;
        }
      }
      if (missing.empty() && busy.empty() && same_job) {
        attempt_record a;
        a.number = std::max(last ? last->number : 0, last_attempt_) + 1;
        a.epoch = epoch_;
        a.leader = options_.index;
        for (unsigned w = 0; w < options_.workers; ++w) {
          a.ports.push_back(by_index[w].first.port);
          a.member_revisions.push_back(by_index[w].second);
        }
        io::result<etcd::range_response> pointer = co_await etcd_.get(keys_.pointer());
        io::result<etcd::range_response> next = co_await etcd_.get(keys_.next_id());
        if (!pointer || !next) continue;
        if (!pointer->kvs.empty()) {
          a.newest_allowed = std::stoull(pointer->kvs[0].value);
        } else if (!next->kvs.empty()) {
          a.newest_allowed = ss::no_checkpoint;  // the job ran here before, and nothing completed
        } else {
          a.newest_allowed = ss::max_checkpoint_id;  // never across workers: resume what the directory holds
        }
        a.first_free_id = next->kvs.empty() ? 1 : std::stoull(next->kvs[0].value);
        // Fenced by the epoch, and by every member key it lists: one replaced since it was read (a
        // worker restarted on this host revokes its dead predecessor's lease at once) would leave
        // the attempt waiting for a worker that never joins it, its key's end unseen by the watch
        // that starts after this write.
        std::vector<etcd::compare> fence{etcd::compare::create_is(keys_.leader(), etcd::compare::result::equal, epoch_)};
        for (unsigned w = 0; w < options_.workers; ++w) {
          fence.push_back(etcd::compare::create_is(keys_.member(w), etcd::compare::result::equal, a.member_revisions[w]));
        }
        std::vector<etcd::op> write{etcd::op::put(keys_.attempt(), a.encode())};
        std::vector<etcd::op> otherwise{etcd::op::range(keys_.leader())};
        io::result<etcd::txn_response> r = co_await etcd_.txn(std::move(fence), std::move(write), std::move(otherwise));
        if (r && r->succeeded) {
          attempt_revision_ = r->revision;
          // The messages of attempts before the previous one (whose left/ and done/ keys this reads).
          if (a.number > 2) (void)co_await etcd_.del_prefix(keys_.messages(a.number - 2));
          co_return a;
        }
        if (r) {
          const bool leading = !r->ranges.empty() && !r->ranges[0].empty() && r->ranges[0][0].create_revision == epoch_;
          if (!leading) co_return std::nullopt;  // fenced: campaign again
          rt::log::info("cluster: a worker joined again while attempt {} was being written; reading the members again",
                        a.number);
          continue;
        }
      } else if (!logged) {
        if (!missing.empty()) rt::log::info("cluster: waiting for worker(s) {} to join", fmt::join(missing, ", "));
        if (!busy.empty()) {
          rt::log::info("cluster: waiting for worker(s) {} to leave attempt {}", fmt::join(busy, ", "), last->number);
        }
      }
    }
    const bool slept = co_await pause(poll_interval);
    if (!slept) co_return std::nullopt;
  }
}

rt::task<std::optional<attempt_record>> worker_loop::await_attempt() {
  for (bool logged = false;; logged = true) {
    if (lost_) co_return std::nullopt;
    const bool over = co_await finished_already();
    if (over) co_return std::nullopt;
    io::result<etcd::range_response> leader = co_await etcd_.get(keys_.leader());
    if (leader && (leader->kvs.empty() || leader->kvs[0].create_revision != epoch_)) co_return std::nullopt;
    if (leader && !leader->kvs.empty()) {
      // The same job as the leader's, or this worker is refused: it could only ever hang the job.
      const std::string who = leader->kvs[0].value;
      io::result<etcd::range_response> theirs = co_await etcd_.get(keys_.members() + who);
      std::optional<member_record> m;
      if (theirs && !theirs->kvs.empty()) m = member_record::decode(theirs->kvs[0].value);
      if (m && m->fingerprint != dataflow::encode_fingerprint(job_.identity())) {
        refusal_ = refused(fmt::format("worker {} does not run the leader's job (worker {}): {}; start every worker "
                                       "with the same job arguments",
                                       options_.index, who, differences(m->fingerprint)));
        co_return std::nullopt;
      }
    }
    io::result<etcd::range_response> current = co_await etcd_.get(keys_.attempt());
    if (current && !current->kvs.empty()) {
      std::optional<attempt_record> a = attempt_record::decode(current->kvs[0].value);
      const bool lists_me = a && a->number > last_attempt_ && options_.index < a->member_revisions.size() &&
                            a->member_revisions[options_.index] == member_revision_;
      if (lists_me && a->epoch == epoch_ && a->ports.size() == options_.workers) {
        attempt_revision_ = current->kvs[0].mod_revision;
        co_return a;
      }
      // Written by a leader whose epoch ended before this worker took it up (the leader died a
      // moment after writing it): this worker never runs it, but the next leader waits for every
      // worker it lists to leave it. Without left/ here, it would wait for this one forever.
      if (lists_me && a->epoch < epoch_ && passed_over_ != a->number) {
        const std::string left = keys_.messages(a->number) + fmt::format("left/{}", options_.index);
        io::result<std::int64_t> put = co_await etcd_.put(left, "", lease_);
        if (put) {
          passed_over_ = a->number;
          rt::log::info("cluster: worker {} never ran attempt {} (its leader's epoch {} ended first): it leaves it",
                        options_.index, a->number, a->epoch);
        }
      }
    }
    if (!logged) rt::log::info("cluster: worker {} waits for the leader's next attempt", options_.index);
    const bool slept = co_await pause(poll_interval);
    if (!slept) co_return std::nullopt;
  }
}

rt::task<dataflow::job_result> worker_loop::run_attempt(const attempt_record& a, std::int64_t watch_from) {
  // Workers that both still reach etcd but no longer each other (a partition between them) see
  // their data connections end within two TTLs, and the attempt with them.
  const auto silent = std::max(std::chrono::milliseconds(2000), 2 * std::chrono::milliseconds(options_.lease_ttl));
  link_settings s{&keys_, options_.index, options_.listen, options_.job_name, options_.secret, silent};
  detail::attempt_link link(etcd_, engine_.at(0), plan_, a, watch_from, s);
  link_ = &link;
  rt::scope watching;
  watching.spawn(link.run());
  rt::log::info("cluster: worker {} runs attempt {} ({}; recovery from {})", options_.index, a.number,
                link.leader() ? "leader" : fmt::format("leader is worker {}", a.leader),
                a.newest_allowed == ss::max_checkpoint_id ? std::string("the newest valid checkpoint")
                : a.newest_allowed == ss::no_checkpoint   ? std::string("nothing: a fresh start")
                                                          : fmt::format("checkpoint {} or older", a.newest_allowed));
  dataflow::job_result result = co_await job_.run_attempt(engine_, link);
  if (!link.leader()) {  // (a follower has no coordinator: it counts what the leader told it)
    result.final.checkpoints_completed = link.completed_seen();
    result.final.checkpoints_aborted = link.aborted_seen();
    result.final.last_checkpoint = link.newest_completed_seen();
  }
  co_await link.stop(result.exit_code != 0);
  watching.request_stop();
  co_await watching.join();
  link_ = nullptr;
  if (result.exit_code == 0) co_await report_done(a);  // (before left/: the leader reads both)
  // The leader waits for this key (or a new member key) before the next attempt, and without a
  // done/ before it the others end the attempt on it (attempt_link.hpp), the failure's reason in
  // its value: retried while etcd is unreachable, unless the lease is lost (then the member key
  // goes, which ends the attempt on the others, and the new one is not listed in it anyway).
  const std::string left = keys_.messages(a.number) + fmt::format("left/{}", options_.index);
  const std::string why = result.exit_code == 0 ? std::string() : result.message;
  while (!lost_) {
    io::result<std::int64_t> put = co_await etcd_.put(left, why, lease_);
    if (put) break;  // (also after the job ended here: the others may still need a next attempt)
    const bool slept = co_await pause(poll_interval);
    if (!slept) break;
  }
  co_return result;
}

rt::task<dataflow::job_result> worker_loop::run() {
  // A job that finished already: nothing to join (and a worker refused for another job).
  const bool over = co_await finished_already();
  io::result<void> joined = io::error(std::make_error_code(std::errc::operation_canceled), "finished already");
  if (!over) joined = co_await join();
  unsigned failures = 0;  // attempts in a row that ended with no checkpoint completed
  ss::checkpoint_id last_allowed = ss::no_checkpoint;
  dataflow::job_result last;
  if (!joined && !over) last = dataflow::job_result{.exit_code = 1, .message = "cluster: " + joined.error().message()};
  while (joined) {
    if (lost_) {
      io::result<void> again = co_await join();
      if (!again) {
        if (refusal_) break;
        const bool slept = co_await pause(std::chrono::milliseconds(500));
        if (!slept) break;
        continue;
      }
    }
    io::result<void> elected = co_await campaign();
    if (!elected) {
      rt::log::warn("cluster: {}", elected.error().message());
      const bool slept = co_await pause(std::chrono::milliseconds(500));
      if (!slept) break;
      continue;
    }
    std::optional<attempt_record> a;
    if (leader_) {
      a = co_await start_attempt();
    } else {
      a = co_await await_attempt();
    }
    if (!a) {
      if (engine_.stop_signal() != 0 || refusal_ || finished_) break;
      continue;
    }
    last_attempt_ = a->number;
    if (a->newest_allowed != last_allowed) failures = 0;  // a checkpoint completed since: progress
    last_allowed = a->newest_allowed;
    last = co_await run_attempt(*a, attempt_revision_ + 1);
    if (engine_.stop_signal() != 0) break;
    if (last.exit_code == 0) {  // this worker's part ended the job: until every worker's did (job_end.cpp)
      completed_ = last;
      failures = 0;
      continue;
    }
    if (last.exit_code == 2) break;
    failures = last.final.checkpoints_completed > 0 ? 1 : failures + 1;
    if (failures >= options_.max_failures) {
      last.message = fmt::format("{} attempts in a row failed; the last: {}", failures, last.message);
      break;
    }
    rt::log::warn("cluster: attempt {} ended: {}; the job restarts", a->number, last.message);
    const bool slept = co_await pause(std::min(std::chrono::milliseconds(2000), poll_interval * failures));
    if (!slept) break;
  }
  if (refusal_) {
    last = *refusal_;
  } else if (finished_) {
    last = *finished_;
  }
  background_.request_stop();
  co_await background_.join();
  if (lease_ != 0) (void)co_await etcd_.lease_revoke(lease_);  // the others see this worker go at once
  co_return last;
}

}  // namespace detail

dataflow::job_result run_worker(dataflow::job_builder& job, dataflow::job_settings settings, worker_options options) {
  if (options.workers == 0 || options.index >= options.workers) {
    return {.exit_code = 2, .message = fmt::format("--worker-index {} must be below --workers {}", options.index,
                                                   options.workers)};
  }
  if (!etcd::endpoint::parse(options.endpoint)) {
    return {.exit_code = 2, .message = fmt::format("--cluster '{}': {}", options.endpoint,
                                                   etcd::endpoint::parse(options.endpoint).error().message())};
  }
  if (options.advertise.port() == 0) options.advertise = options.listen;
  const rt::log::scoped_sink logs(settings.log_sink);
  const bool handle_signals = settings.handle_signals;
  const unsigned executors = settings.executors;
  auto prepared = dataflow::job_worker::prepare(job, settings, options.workers, options.index);
  if (auto* r = std::get_if<dataflow::job_result>(&prepared)) return *r;
  dataflow::job_worker& worker = *std::get<std::unique_ptr<dataflow::job_worker>>(prepared);
  const dataflow::job_plan plan = dataflow::job_plan::make(
      job, dataflow::plan_shape{.workers = options.workers, .executors = executors, .transport = settings.transport,
                                .floating_buffers = settings.floating_buffers});
  dataflow::job_result result;
  rt::engine eng({.executors = executors, .handle_signals = handle_signals});
  {
    std::stop_callback on_stop(settings.stop, [&eng] { eng.request_stop(); });
    detail::worker_loop loop(worker, plan, std::move(options), eng);
    result = eng.block_on(loop.run());
    if (eng.stop_signal() != 0) {
      result.exit_code = 130;
      result.message = fmt::format("stopped by signal {}", eng.stop_signal());
    }
    eng.stop();
  }
  return result;
}

}  // namespace sluice::cluster
