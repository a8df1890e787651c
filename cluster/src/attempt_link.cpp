// See attempt_link.hpp.

#include "attempt_link.hpp"

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/timer.hpp>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <span>

namespace sluice::cluster::detail {

namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;
using json = nlohmann::json;

namespace {

std::optional<std::uint64_t> number_at(std::string_view text) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return n;
}

// "<a>/<b>" -> (a, b) as numbers.
std::optional<std::pair<std::uint64_t, std::uint64_t>> two_numbers(std::string_view text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto a = number_at(text.substr(0, slash));
  const auto b = number_at(text.substr(slash + 1));
  if (!a || !b) return std::nullopt;
  return std::pair{*a, *b};
}

std::optional<ss::checkpoint_mode> mode_named(std::string_view name) {
  for (auto m : {ss::checkpoint_mode::aligned, ss::checkpoint_mode::unaligned, ss::checkpoint_mode::aligned_timeout}) {
    if (ss::to_string(m) == name) return m;
  }
  return std::nullopt;
}

ss::abort_reason reason_named(std::string_view name) {
  for (int r = 0; r < 16; ++r) {
    const auto reason = static_cast<ss::abort_reason>(r);
    if (ss::to_string(reason) == name) return reason;
  }
  return ss::abort_reason::coordinator;
}

}  // namespace

// A task of another worker, as the leader's coordinator sees it.
class attempt_link::remote_task final : public ss::checkpoint_participant {
 public:
  remote_task(attempt_link& link, ss::task_id id, bool source) : link_(link), id_(id), source_(source) {}
  ss::task_id id() const noexcept override { return id_; }
  bool is_source() const noexcept override { return source_; }
  rt::executor& home() const noexcept override { return link_.home_; }
  void trigger_checkpoint(ss::checkpoint_id id, ss::checkpoint_mode mode, const ss::trigger_options& o) override {
    link_.send_trigger(id, mode, o);
  }
  void notify_checkpoint_complete(ss::checkpoint_id id) override { link_.send_complete(id); }
  void notify_checkpoint_aborted(ss::checkpoint_id id, ss::abort_reason reason, std::string_view detail) override {
    link_.send_abort(id, reason, detail);
  }

 private:
  attempt_link& link_;
  ss::task_id id_;
  bool source_;
};

attempt_link::attempt_link(etcd::client& etcd, rt::executor& home, const dataflow::job_plan& plan, attempt_record attempt,
                           std::int64_t watch_from, link_settings settings)
    : etcd_(etcd), home_(home), plan_(plan), attempt_(std::move(attempt)), watch_from_(watch_from),
      settings_(std::move(settings)) {}

attempt_link::~attempt_link() = default;

std::vector<io::address> attempt_link::peers() const {
  std::vector<io::address> out;
  for (const std::string& port : attempt_.ports) {
    io::result<io::address> a = io::address::parse(port);
    out.push_back(a ? *a : io::address{});
  }
  return out;
}

buffers::transport_options attempt_link::transport() const {
  // The hello (buffers/hello.hpp): peers of another job, another attempt or without the secret are
  // refused; the attempt number is the epoch, so a worker still in an older attempt cannot connect.
  buffers::transport_options o;
  o.job_name = settings_.job_name;
  o.epoch = attempt_.number;
  o.node_id = attempt_.ports.at(settings_.worker);
  o.secret = std::span<const std::byte>(settings_.secret);
  o.dead_peer_timeout = settings_.dead_peer_timeout;
  return o;
}

std::string attempt_link::message_key(std::string_view suffix) const {
  return settings_.where->messages(attempt_.number) + std::string(suffix);
}

// One sender writes the outbox in call order. A put that fails (etcd unreachable, restarting,
// timed out) is tried again until it is written or the attempt stops: a lost message could hang
// the job (an end of data, the final `f`, a `ready/`), and writing the same value twice is harmless.
rt::task<void> attempt_link::send_outbox() {
  bool warned = false;
  while (!outbox_.empty()) {
    io::result<std::int64_t> done = co_await etcd_.put(outbox_.front().first, outbox_.front().second);
    if (done) {
      if (warned) rt::log::info("cluster: etcd takes this worker's messages again");
      warned = false;
      outbox_.pop_front();
      continue;
    }
    if (done.error().code() == std::errc::operation_canceled) break;  // abandoned (stop(true))
    if (!warned) {
      rt::log::warn("cluster: {}; {} message(s) wait to be written, retrying", done.error().message(), outbox_.size());
    }
    warned = true;
    const bool slept = co_await rt::sleep_for(std::chrono::milliseconds(200));
    if (!slept) break;
  }
  sending_ = false;
}

void attempt_link::put(std::string key, std::string value) {
  outbox_.emplace_back(std::move(key), std::move(value));
  if (sending_) return;
  sending_ = true;
  scope_.spawn(send_outbox());
}

// --- the leader's coordinator ---------------------------------------------------------------------

rt::task<io::result<void>> attempt_link::reserve_ids(ss::checkpoint_id up_to) {
  std::vector<etcd::compare> fence{etcd::compare::create_is(settings_.where->leader(), etcd::compare::result::equal,
                                                            attempt_.epoch)};
  std::vector<etcd::op> ops{etcd::op::put(settings_.where->next_id(), std::to_string(up_to + 1))};
  io::result<etcd::txn_response> r = co_await etcd_.txn(std::move(fence), std::move(ops));
  if (!r) co_return r.error();
  if (!r->succeeded) {
    co_return io::error(std::make_error_code(std::errc::operation_not_permitted),
                        fmt::format("fenced: worker {} is no longer the leader of epoch {}", settings_.worker,
                                    attempt_.epoch));
  }
  co_return io::result<void>{};
}

rt::task<io::result<void>> attempt_link::publish(ss::checkpoint_id id) {
  std::vector<etcd::compare> fence{etcd::compare::create_is(settings_.where->leader(), etcd::compare::result::equal,
                                                            attempt_.epoch)};
  std::vector<etcd::op> ops{etcd::op::put(settings_.where->pointer(), std::to_string(id))};
  io::result<etcd::txn_response> r = co_await etcd_.txn(std::move(fence), std::move(ops));
  if (!r) co_return r.error();
  if (!r->succeeded) {
    co_return io::error(std::make_error_code(std::errc::operation_not_permitted),
                        fmt::format("fenced: worker {} is no longer the leader of epoch {}; checkpoint {} is not the "
                                    "job's",
                                    settings_.worker, attempt_.epoch, id));
  }
  scope_.spawn(tidy(id, r->revision));
  co_return io::result<void>{};
}

// After checkpoint `published`: its messages and those before it are no longer needed, and etcd's
// history up to the previous publication is compacted.
rt::task<void> attempt_link::tidy(ss::checkpoint_id published, std::int64_t revision) {
  for (const char* kind : {"k/", "d/"}) {
    (void)co_await etcd_.del_prefix(message_key(fmt::format("{}{}/", kind, published)));
  }
  for (const char* kind : {"t/", "c/", "x/"}) (void)co_await etcd_.del(message_key(fmt::format("{}{}", kind, published)));
  if (last_publish_revision_ > 0) {
    io::result<void> compacted = co_await etcd_.compact(last_publish_revision_);
    if (!compacted) rt::log::debug("cluster: compact: {}", compacted.error().message());
  }
  last_publish_revision_ = revision;
}

std::vector<ss::checkpoint_participant*> attempt_link::remote_tasks(ss::checkpoint_acknowledger& coordinator) {
  coordinator_ = &coordinator;
  std::vector<ss::checkpoint_participant*> out;
  for (const dataflow::task_plan& t : plan_.tasks()) {
    if (t.worker == settings_.worker) continue;
    const bool source = plan_.stages()[t.stage].upstreams.empty();
    remote_.push_back(std::make_unique<remote_task>(*this, t.id, source));
    out.push_back(remote_.back().get());
  }
  return out;
}

void attempt_link::send_trigger(ss::checkpoint_id id, ss::checkpoint_mode mode, const ss::trigger_options& o) {
  if (id <= triggered_) return;  // one t/ per checkpoint, whichever remote source is told first
  triggered_ = id;
  put(message_key(fmt::format("t/{}", id)),
      json{{"mode", std::string(ss::to_string(mode))}, {"alignment_ms", o.alignment_timeout.count()}}.dump());
}

void attempt_link::send_complete(ss::checkpoint_id id) {
  if (!completed_sent_.insert(id).second) return;
  put(message_key(fmt::format("c/{}", id)), "");
}

void attempt_link::send_abort(ss::checkpoint_id id, ss::abort_reason reason, std::string_view detail) {
  if (!aborted_sent_.insert(id).second) return;
  put(message_key(fmt::format("x/{}", id)),
      json{{"reason", std::string(ss::to_string(reason))}, {"detail", std::string(detail)}}.dump());
}

rt::task<void> attempt_link::all_data_ended() { (void)co_await all_data_ended_.wait(); }

void attempt_link::finish() { put(message_key("f"), ""); }

// --- every worker ---------------------------------------------------------------------------------

void attempt_link::count_data_ended(ss::task_id task) {
  data_ended_.insert(task);
  if (data_ended_.size() == plan_.tasks().size()) all_data_ended_.set();
}

void attempt_link::data_ended(ss::task_id task) {
  if (leader()) {
    count_data_ended(task);
  } else {
    put(message_key(fmt::format("e/{}", task)), "");
  }
}

namespace {
rt::task<void> wait_for(rt::event* e) { (void)co_await e->wait(); }
}  // namespace

rt::task<void> attempt_link::ports_ready() {
  put(message_key(fmt::format("ready/{}", settings_.worker)), "");
  while (!all_ready_.is_set() && !ended_.is_set()) {
    const bool ready = co_await rt::with_timeout(wait_for(&all_ready_), std::chrono::milliseconds(100));
    (void)ready;
  }
}

rt::task<void> attempt_link::finish_requested() { (void)co_await finish_.wait(); }

void attempt_link::failed(std::string why) {
  failed_here_ = true;
  put(message_key(fmt::format("F/{}", settings_.worker)), std::move(why));
}

void attempt_link::end(std::string why) {
  if (ended_.is_set()) return;
  ended_why_ = std::move(why);
  ended_.set();
}

rt::task<std::string> attempt_link::ended() {
  const bool woken = co_await ended_.wait();
  // Stopped instead: the runner stops this wait once its tasks have all ended, just before it
  // destroys them (dataflow/runner.cpp), so from now on nothing may reach them.
  if (!woken) tasks_done_ = true;
  co_return woken ? ended_why_ : std::string();
}

// (encode_acknowledgement) snapshot_started_at is not sent: it is this host's steady clock,
// meaningless on the leader's, so the leader reports no start delay for a remote task
// (coordinator.hpp, task_checkpoint_breakdown).
void attempt_link::acknowledge(ss::task_id task, ss::checkpoint_id id, ss::task_checkpoint_stats stats) {
  std::string value = encode_acknowledgement(stats);
  home_.post([this, key = message_key(fmt::format("k/{}/{}", id, task)), value = std::move(value)]() mutable {
    put(std::move(key), std::move(value));
  });
}

void attempt_link::decline(ss::task_id task, ss::checkpoint_id id, ss::abort_reason reason, std::string detail) {
  home_.post([this, key = message_key(fmt::format("d/{}/{}", id, task)),
              value = json{{"reason", std::string(ss::to_string(reason))}, {"detail", detail}}.dump()]() mutable {
    put(std::move(key), std::move(value));
  });
}

// --- the watch ------------------------------------------------------------------------------------

void attempt_link::on_message(std::string_view suffix, const std::string& value, bool deleted) {
  if (deleted) return;  // (tidying)
  const char kind = suffix.empty() ? '\0' : suffix[0];
  const std::string_view rest = suffix.size() > 2 ? suffix.substr(2) : std::string_view();
  if (suffix.rfind("ready/", 0) == 0) {
    if (const auto who = number_at(suffix.substr(6))) {
      ready_.insert(*who);
      if (ready_.size() == attempt_.ports.size()) all_ready_.set();
    }
    return;
  }
  if (kind == 'F') {
    const auto who = number_at(rest);
    if (who && *who != settings_.worker) end(fmt::format("worker {} failed: {}", *who, value));
    return;
  }
  if (suffix.rfind("done/", 0) == 0) {
    if (const auto who = number_at(suffix.substr(5))) done_.insert(*who);
    return;
  }
  // A worker that left this attempt without ending the job in it (no done/ first) is out of it for
  // good. Its F/ says so too, but a failed worker drops its unsent messages (stop(true)), and a
  // failure before any data connection (its data port's bind, say) breaks nothing the others see:
  // they would wait for its ready/ forever, and it for their next attempt. Its left/, retried until
  // written, is what they are sure to see.
  if (suffix.rfind("left/", 0) == 0) {
    const auto who = number_at(suffix.substr(5));
    if (who && *who != settings_.worker && !done_.contains(*who)) {
      end(value.empty() ? fmt::format("worker {} left attempt {}", *who, attempt_.number)
                        : fmt::format("worker {} left attempt {}: {}", *who, attempt_.number, value));
    }
    return;
  }
  if (leader()) {
    if (kind == 'e') {
      if (const auto task = number_at(rest)) count_data_ended(static_cast<ss::task_id>(*task));
    } else if (kind == 'k' && coordinator_ != nullptr) {
      const auto ids = two_numbers(rest);
      auto stats = decode_acknowledgement(value);
      if (!ids || !stats) return;
      coordinator_->acknowledge(static_cast<ss::task_id>(ids->second), ids->first, std::move(*stats));
    } else if (kind == 'd' && coordinator_ != nullptr) {
      const auto ids = two_numbers(rest);
      const json j = json::parse(value, nullptr, false);
      if (!ids || j.is_discarded()) return;
      coordinator_->decline(static_cast<ss::task_id>(ids->second), ids->first,
                            reason_named(j.value("reason", std::string())), j.value("detail", std::string()));
    }
    return;
  }
  // A follower: the leader's words, to this worker's tasks, while they exist. Once the attempt
  // ended here (end(), this worker's failure, or its tasks all done: see ended()) the runner
  // stops and destroys them, and a message the watch delivers late (a watch stalled on a silent
  // network, then resumed) must not reach them.
  if (ended_.is_set() || failed_here_ || tasks_done_) return;
  if (kind == 'f') {
    finish_.set();
  } else if (kind == 't') {
    const auto id = number_at(rest);
    const json j = json::parse(value, nullptr, false);
    if (!id || j.is_discarded()) return;
    const ss::checkpoint_mode mode = mode_named(j.value("mode", std::string())).value_or(ss::checkpoint_mode::aligned);
    const ss::trigger_options o{std::chrono::milliseconds(j.value("alignment_ms", std::int64_t{0}))};
    for (ss::checkpoint_participant* t : local_) {
      if (t->is_source()) t->home().post([t, id = *id, mode, o] { t->trigger_checkpoint(id, mode, o); });
    }
  } else if (kind == 'c') {
    const auto id = number_at(rest);
    if (!id) return;
    if (seen_completed_.insert(*id).second) newest_completed_ = std::max(newest_completed_, *id);
    for (ss::checkpoint_participant* t : local_) t->home().post([t, id = *id] { t->notify_checkpoint_complete(id); });
  } else if (kind == 'x') {
    const auto id = number_at(rest);
    const json j = json::parse(value, nullptr, false);
    if (!id || j.is_discarded()) return;
    const ss::abort_reason reason = reason_named(j.value("reason", std::string()));
    const std::string detail = j.value("detail", std::string());
    seen_aborted_.insert(*id);
    for (ss::checkpoint_participant* t : local_) {
      t->home().post([t, id = *id, reason, detail] { t->notify_checkpoint_aborted(id, reason, detail); });
    }
  }
}

void attempt_link::on_event(const etcd::watch_event& e) {
  const keys& k = *settings_.where;
  const std::string& key = e.kv.key;
  const bool deleted = e.type == etcd::watch_event::kind::del;
  const std::string mine = k.messages(attempt_.number);
  if (key.rfind(mine, 0) == 0) {
    on_message(std::string_view(key).substr(mine.size()), e.kv.value, deleted);
  } else if (key.rfind(k.members(), 0) == 0) {
    if (deleted) end(fmt::format("worker {} left the job (its lease ended)", key.substr(k.members().size())));
  } else if (key == k.leader()) {
    if (deleted || e.kv.create_revision != attempt_.epoch) end("the leader left the job");
  } else if (key == k.attempt() && !deleted) {
    const std::optional<attempt_record> next = attempt_record::decode(e.kv.value);
    if (next && next->number > attempt_.number) end(fmt::format("attempt {} started", next->number));
  }
}

rt::task<void> attempt_link::run() {
  std::int64_t from = watch_from_;
  bool warned = false;
  while (!stop_.is_set()) {
    io::result<etcd::watch> w = co_await etcd_.watch_prefix(settings_.where->prefix, from);
    if (!w) {
      if (stop_.is_set()) break;
      if (!warned) rt::log::warn("cluster: watching the job's keys: {}; retrying", w.error().message());
      warned = true;
      const bool slept = co_await rt::sleep_for(std::chrono::milliseconds(250));
      if (!slept) break;
      continue;
    }
    warned = false;
    for (;;) {
      io::result<etcd::watch_batch> batch = co_await w->next();
      if (!batch) {
        if (batch.error().code() == etcd::make_error_code(etcd::errc::compacted)) {
          end("lost track of the job's messages (etcd's history was compacted past them)");
          co_await w->close();
          co_return;
        }
        break;  // reopen from `from`
      }
      for (const etcd::watch_event& e : batch->events) {
        from = std::max(from, e.kv.mod_revision + 1);
        on_event(e);
      }
    }
    co_await w->close();
  }
}

rt::task<void> attempt_link::stop(bool abandon) {
  stop_.set();
  if (abandon) scope_.request_stop();
  co_await scope_.join();
}

}  // namespace sluice::cluster::detail
