// See worker_loop.hpp: how the job ends on every worker, even one killed in its last moments.
//
// A worker's tasks end the job once the leader's final checkpoint completed and its sinks committed
// it (dataflow/job_worker.hpp: run_attempt's exit code 0). Exiting right then would strand a worker
// killed a moment before it got there: restarted, it would wait for peers that are gone, and its
// sinks would never publish the final checkpoint. So a worker whose tasks ended the job marks it
// (`a/<n>/done/<w>`, with no lease: it outlives the worker) and waits. The leader writes `finished`
// once every worker of attempt n is done; a worker that went before it was done comes back (or
// another leads) and the next attempt restores the final checkpoint, which ends at once and
// publishes what that worker's sinks had staged.

#include "worker_loop.hpp"

#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace sluice::cluster::detail {

namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;

std::string worker_loop::differences(const std::string& theirs) const {
  std::string why = "its job or arguments differ";
  if (io::result<dataflow::job_fingerprint> fp = dataflow::decode_fingerprint(theirs)) {
    std::vector<std::string> d = dataflow::fingerprint_differences(*fp, job_.identity(), ss::no_checkpoint);
    const std::string taken = fmt::format("checkpoint {} was taken with ", ss::no_checkpoint);
    for (std::string& line : d) {
      if (line.rfind(taken, 0) == 0) line = "it ran " + line.substr(taken.size());
    }
    if (!d.empty()) why = fmt::format("{}", fmt::join(d, "; "));
  }
  return why;
}

rt::task<bool> worker_loop::finished_already() {
  io::result<etcd::range_response> r = co_await etcd_.get(keys_.finished());
  if (!r || r->kvs.empty()) co_return false;  // (etcd unreachable: asked again later)
  const std::optional<finished_record> f = finished_record::decode(r->kvs[0].value);
  if (!f) {
    refusal_ = refused(fmt::format("job '{}' has a `finished` record in etcd that is not sluice's ({}): run the job "
                                   "under another --job-name",
                                   options_.job_name, keys_.finished()));
    co_return true;
  }
  if (f->fingerprint != dataflow::encode_fingerprint(job_.identity())) {
    refusal_ = refused(fmt::format("job '{}' finished (checkpoint {}) running another job: {}; a finished job is not "
                                   "run again: give this one another --job-name",
                                   options_.job_name, f->checkpoint, differences(f->fingerprint)));
    co_return true;
  }
  if (completed_) {
    finished_ = *completed_;
  } else {
    finished_ = dataflow::job_result{
        .exit_code = 0,
        .message = fmt::format("job '{}' had finished (checkpoint {}): worker {} has nothing left to do",
                               options_.job_name, f->checkpoint, options_.index)};
    rt::log::info("cluster: {}", finished_->message);
  }
  co_return true;
}

rt::task<void> worker_loop::report_done(const attempt_record& a) {
  const std::string key = keys_.done(a.number, options_.index);
  for (bool warned = false;; warned = true) {
    // (written again after an error that may have reached etcd: the same value twice is harmless)
    io::result<std::int64_t> put = co_await etcd_.put(key, std::to_string(member_revision_));
    if (put) co_return;
    if (!warned) rt::log::warn("cluster: worker {} cannot mark its tasks done: {}; retrying", options_.index, put.error().message());
    const bool slept = co_await pause(poll_interval);
    if (!slept) co_return;  // stopped: the job restarts from its final checkpoint next time
  }
}

rt::task<bool> worker_loop::finish_if_all_done(const attempt_record& last) {
  io::result<etcd::range_response> done = co_await etcd_.get_prefix(keys_.done(last.number));
  if (!done) co_return false;
  std::set<unsigned> who;
  const std::size_t skip = keys_.done(last.number).size();
  for (const etcd::key_value& kv : done->kvs) {
    const std::string w = kv.key.substr(std::min(skip, kv.key.size()));
    if (!w.empty() && w.size() < 6 && std::all_of(w.begin(), w.end(), ::isdigit)) who.insert(static_cast<unsigned>(std::stoul(w)));
  }
  for (unsigned w = 0; w < options_.workers; ++w) {
    if (!who.contains(w)) co_return false;
  }
  io::result<etcd::range_response> pointer = co_await etcd_.get(keys_.pointer());
  if (!pointer) co_return false;
  finished_record f{last.number, pointer->kvs.empty() ? ss::no_checkpoint : std::stoull(pointer->kvs[0].value),
                    dataflow::encode_fingerprint(job_.identity())};
  std::vector<etcd::compare> fence{etcd::compare::create_is(keys_.leader(), etcd::compare::result::equal, epoch_),
                                   etcd::compare::missing(keys_.finished())};
  std::vector<etcd::op> write{etcd::op::put(keys_.finished(), f.encode())};
  io::result<etcd::txn_response> r = co_await etcd_.txn(std::move(fence), std::move(write));
  if (!r) co_return false;  // (maybe written: asked again at the next turn)
  if (!r->succeeded) {
    const bool over = co_await finished_already();  // written before (an answer lost), or fenced: not leading
    co_return over;
  }
  rt::log::info("cluster: every worker ended attempt {} with the final checkpoint {}: job '{}' finished", last.number,
                f.checkpoint, options_.job_name);
  finished_ = completed_ ? *completed_ : dataflow::job_result{};
  co_return true;
}

}  // namespace sluice::cluster::detail
