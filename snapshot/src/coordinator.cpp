// The checkpoint coordinator (see coordinator.hpp for the lifecycle). One run_checkpoint coroutine
// per checkpoint drives it from trigger to end; everything else (acknowledgements, declines, tasks
// joining and leaving, stop) only records a verdict in the pending checkpoint and sets its
// `decided` event, so each checkpoint ends in exactly one place: finish().

#include <sluice/snapshot/coordinator.hpp>

#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/system.hpp>
#include <sluice/runtime/timer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <coroutine>
#include <exception>
#include <stop_token>
#include <utility>

namespace sluice::snapshot {

namespace {

std::uint64_t now_unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        runtime::sys().wall_now().time_since_epoch())
                                        .count());
}

// Continues the awaiting coroutine on `target` through its inbox, even when already there, so
// whatever this thread posted to `target` before has run by then (the inbox is FIFO per sender).
struct inbox_hop {
  runtime::executor* target;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const {
    runtime::executor* ex = target;
    ex->post([ex, h] { ex->schedule(h); });
  }
  void await_resume() const noexcept {}
};

bool quiet(abort_reason reason) noexcept {
  return reason == abort_reason::subsumed || reason == abort_reason::cancelled;
}

}  // namespace

coordinator::coordinator(runtime::executor& home, checkpoint_storage& storage, coordinator_options options)
    : home_(&home), storage_(&storage), options_(std::move(options)), next_id_(options_.first_checkpoint_id) {
  assert(options_.max_concurrent >= 1);
  assert(options_.history_size >= 1);
  assert(options_.first_checkpoint_id != no_checkpoint);
}

coordinator::~coordinator() {
  assert(pending_.empty() && scope_.live() == 0 && "stop() the coordinator before destroying it");
}

void coordinator::assert_home() const { SLUICE_ASSERT(home_->is_current(), "coordinator used off its home executor"); }

// --- tasks ------------------------------------------------------------------------------------

void coordinator::add_participant(checkpoint_participant& p) {
  const participant_entry entry{&p, &p.home(), p.is_source()};
  const task_id task = p.id();
  home_->post([this, task, entry] { on_added(task, entry); });
}

runtime::task<void> coordinator::remove_participant(task_id task, std::string why) {
  runtime::executor* caller = runtime::executor::current();
  assert(caller != nullptr && "remove_participant off an executor");
  co_await inbox_hop{home_};  // also after every acknowledgement the caller posted before
  runtime::executor* task_home = nullptr;
  if (auto it = participants_.find(task); it != participants_.end()) task_home = it->second.executor;
  on_removed(task, why);
  // After every call the coordinator already posted to the task: none can follow.
  if (task_home != nullptr) co_await inbox_hop{task_home};
  if (!caller->is_current()) co_await runtime::switch_to(*caller);
}

void coordinator::acknowledge(task_id task, checkpoint_id id, task_checkpoint_stats stats) {
  home_->post([this, task, id, stats = std::move(stats)]() mutable { on_acknowledged(task, id, std::move(stats)); });
}

void coordinator::written(task_id task, checkpoint_id id) {
  home_->post([this, task, id] { on_written(task, id); });
}

void coordinator::decline(task_id task, checkpoint_id id, abort_reason reason, std::string detail) {
  home_->post([this, task, id, reason, detail = std::move(detail)] { on_declined(task, id, reason, detail); });
}

void coordinator::on_added(task_id task, participant_entry entry) {
  assert_home();
  if (stopping_) return;
  if (!participants_.try_emplace(task, entry).second) {
    runtime::log::error("checkpoint coordinator: task {} is already registered; ignoring the second one", task);
    return;
  }
  abort_all_pending(abort_reason::coordinator, fmt::format("task {} joined the job", task));
}

void coordinator::on_removed(task_id task, const std::string& why) {
  assert_home();
  if (participants_.erase(task) == 0) return;
  const std::string detail = fmt::format("task {} left the job: {}", task, why);
  for (auto& [id, p] : pending_) {
    if (p.tasks.contains(task)) request_abort(p, abort_reason::coordinator, detail);
  }
}

void coordinator::on_written(task_id task, checkpoint_id id) {
  assert_home();
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second.verdict || !it->second.tasks.contains(task)) return;
  pending_checkpoint& p = it->second;
  p.written.insert(task);
  if (p.written.size() == p.tasks.size()) p.decided.set();
}

void coordinator::on_acknowledged(task_id task, checkpoint_id id, task_checkpoint_stats stats) {
  assert_home();
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    runtime::log::debug("checkpoint {}: late acknowledgement from task {} ignored", id, task);
    return;
  }
  pending_checkpoint& p = it->second;
  if (p.verdict) return;
  if (!p.tasks.contains(task)) {
    runtime::log::warn("checkpoint {}: acknowledgement from task {}, which is not part of it, ignored", id, task);
    return;
  }
  if (!p.acks.try_emplace(task, std::move(stats)).second) {
    runtime::log::warn("checkpoint {}: task {} acknowledged twice", id, task);
    return;
  }
  p.written.insert(task);  // durable implies written
  if (p.written.size() == p.tasks.size()) p.decided.set();
  if (p.acks.size() == p.tasks.size()) p.durable.set();
}

void coordinator::on_declined(task_id task, checkpoint_id id, abort_reason reason, const std::string& detail) {
  assert_home();
  auto it = pending_.find(id);
  if (it == pending_.end() || !it->second.tasks.contains(task)) return;
  request_abort(it->second, reason, fmt::format("task {} declined checkpoint {}: {}", task, id, detail));
}

void coordinator::request_abort(pending_checkpoint& p, abort_reason reason, std::string detail) {
  // Decided already, or past the point of no return: committing with every state file durable.
  if (p.verdict || (p.at == stage::committing && p.acks.size() == p.tasks.size())) return;
  p.verdict = checkpoint_outcome::aborted(reason, std::move(detail));
  p.decided.set();
  p.durable.set();
}

void coordinator::fail_commit(pending_checkpoint& p, std::string detail) {
  if (!p.verdict) p.verdict = checkpoint_outcome::aborted(abort_reason::io_error, std::move(detail));
  p.decided.set();
  p.durable.set();
}

void coordinator::abort_all_pending(abort_reason reason, const std::string& detail) {
  for (auto& [id, p] : pending_) request_abort(p, reason, detail);
}

// --- triggering -------------------------------------------------------------------------------

bool coordinator::enough_participants() const {
  return participants_.size() >= std::max<std::size_t>(1, options_.expected_tasks);
}

void coordinator::start() {
  assert_home();
  assert(!started_ && "coordinator started twice");
  assert(options_.interval.count() > 0 && "periodic checkpoints need an interval above zero");
  if (stopping_) return;
  started_ = true;
  last_trigger_at_ = home_->now();
  scope_.spawn(trigger_loop());
}

// Each turn either waits (for a slot, or until the next trigger is due) or triggers once.
void coordinator::stop_periodic() {
  assert_home();
  periodic_stopped_ = true;  // the loop ends at its next turn (a sleep or a slot's wait ending)
}

runtime::task<void> coordinator::trigger_loop() {
  while (!stopping_ && !periodic_stopped_) {
    if (pending_.size() >= options_.max_concurrent || forced_waiting_ > 0) {
      slot_free_.reset();
      const bool woken = co_await slot_free_.wait();
      if (!woken) co_return;
      continue;
    }
    auto due = last_trigger_at_ + options_.interval;
    if (last_end_at_) due = std::max(due, *last_end_at_ + options_.min_pause);
    if (home_->now() < due) {
      const bool slept = co_await runtime::sleep_until(due);
      if (!slept) co_return;
      continue;
    }
    if (next_id_ > reserved_up_to_ && options_.reserve_ids) {
      const bool reserved = co_await reserve_next();
      if (!reserved) {
        last_trigger_at_ = home_->now();
        continue;
      }
      continue;  // the world may have changed while we waited: look again
    }
    if (!enough_participants()) {
      runtime::log::debug("checkpoint coordinator: {} of {} tasks registered; skipping a trigger", participants_.size(),
                          std::max<std::size_t>(1, options_.expected_tasks));
      last_trigger_at_ = home_->now();
      continue;
    }
    begin_checkpoint(options_.mode, nullptr);
  }
}

runtime::task<bool> coordinator::wait_for_slot() {
  ++forced_waiting_;
  bool woken = true;
  while (woken && !stopping_ && pending_.size() >= options_.max_concurrent) {
    slot_free_.reset();
    woken = co_await slot_free_.wait();
  }
  if (--forced_waiting_ == 0) slot_free_.set();  // the trigger loop yielded to us: let it look again
  co_return woken && !stopping_;
}

runtime::task<checkpoint_outcome> coordinator::trigger_now() { return trigger_now(options_.mode); }

runtime::task<checkpoint_outcome> coordinator::trigger_now(checkpoint_mode mode) {
  assert_home();
  struct call_guard {  // stop() waits for every trigger_now to leave
    coordinator* self;
    explicit call_guard(coordinator* c) : self(c) { ++self->active_calls_; }
    ~call_guard() {
      if (--self->active_calls_ == 0) self->calls_done_.set();
    }
  } guard(this);
  bool got_slot = co_await wait_for_slot();
  while (got_slot && next_id_ > reserved_up_to_ && options_.reserve_ids) {
    const bool reserved = co_await reserve_next();
    if (!reserved) {
      co_return checkpoint_outcome::aborted(abort_reason::io_error,
                                            fmt::format("checkpoint id {} could not be reserved", next_id_));
    }
    got_slot = co_await wait_for_slot();
  }
  if (!got_slot) co_return checkpoint_outcome::aborted(abort_reason::cancelled, "the checkpoint coordinator is stopping");
  if (participants_.empty()) co_return checkpoint_outcome::aborted(abort_reason::coordinator, "no task is registered");
  outcome_slot slot;
  const checkpoint_id id = begin_checkpoint(mode, &slot);
  const bool ended = co_await slot.done.wait();
  if (!ended && !slot.done.is_set()) {  // our caller was stopped; the checkpoint goes on without us
    if (auto it = pending_.find(id); it != pending_.end()) it->second.waiter = nullptr;
    co_return checkpoint_outcome::aborted(abort_reason::cancelled,
                                          fmt::format("stopped waiting for checkpoint {} to end", id));
  }
  co_return std::move(slot.outcome);
}

runtime::task<bool> coordinator::reserve_next() {
  const checkpoint_id up_to = next_id_ + std::max<checkpoint_id>(1, options_.reserve_block) - 1;
  io::result<void> reserved = co_await options_.reserve_ids(up_to);
  if (!reserved) {
    runtime::log::warn("checkpoint coordinator: ids {} to {} could not be reserved: {}", next_id_, up_to,
                       reserved.error().message());
    co_return false;
  }
  reserved_up_to_ = std::max(reserved_up_to_, up_to);
  co_return true;
}

checkpoint_id coordinator::begin_checkpoint(checkpoint_mode mode, outcome_slot* waiter) {
  assert(!stopping_ && pending_.size() < options_.max_concurrent && !participants_.empty());
  assert((!options_.reserve_ids || next_id_ <= reserved_up_to_) && "checkpoint id used before it was reserved");
  const checkpoint_id id = next_id_++;
  auto [it, inserted] = pending_.try_emplace(id);
  assert(inserted && "checkpoint ids are never reused");
  pending_checkpoint& p = it->second;
  p.id = id;
  p.mode = mode;
  p.triggered_at = home_->now();
  p.triggered_unix_ms = now_unix_ms();
  p.tasks = participants_;
  p.waiter = waiter;
  last_trigger_at_ = p.triggered_at;
  if (std::none_of(p.tasks.begin(), p.tasks.end(), [](const auto& t) { return t.second.source; })) {
    runtime::log::warn("checkpoint {}: no registered task is a source; it can only expire", id);
  }
  runtime::log::debug("checkpoint {}: triggering ({}, {} tasks)", id, to_string(mode), p.tasks.size());
  scope_.spawn(run_checkpoint(id));
  return id;
}

// --- one checkpoint ---------------------------------------------------------------------------

runtime::task<void> coordinator::run_checkpoint(checkpoint_id id) {
  std::string failure;
  try {
    co_await drive(id);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  pending_checkpoint& p = pending_.at(id);
  // Nothing may still be creating files in chk-<id>/ once it ends (retention may remove it).
  if (p.prepared && !p.prepared->done.is_set()) co_await await_prepared(p.prepared);
  if (!failure.empty() && !p.committed && !p.verdict) {
    p.verdict = checkpoint_outcome::aborted(abort_reason::coordinator,
                                            fmt::format("checkpoint {} failed in the coordinator: {}", id, failure));
  }
  co_await finish(id);
}

runtime::task<void> coordinator::drive(checkpoint_id id) {
  pending_checkpoint& p = pending_.at(id);
  co_await open_dir(p);
  if (p.verdict) co_return;

  p.at = stage::triggered;
  const trigger_options trigger{options_.alignment_timeout};
  const checkpoint_mode mode = p.mode;
  for (const auto& entry : p.tasks) {
    if (!entry.second.source) continue;
    checkpoint_participant* target = entry.second.participant;
    entry.second.executor->post([target, id, mode, trigger] { target->trigger_checkpoint(id, mode, trigger); });
  }

  if (p.written.size() < p.tasks.size()) {
    const auto waited = co_await runtime::with_timeout(wait_for(&p.decided), options_.checkpoint_timeout);
    if (!waited.has_value()) {
      request_abort(p, abort_reason::expired,
                    fmt::format("checkpoint {} expired after {} ms; not acknowledged by task(s) {}", id,
                                options_.checkpoint_timeout.count(), missing_tasks(p, false)));
    }
  }
  if (p.verdict) co_return;
  if (p.written.size() < p.tasks.size()) {  // stopped while waiting (stop() sets the verdict first)
    request_abort(p, abort_reason::cancelled, "the checkpoint coordinator is stopping");
    co_return;
  }

  const bool got_slot = co_await commit_slot_.acquire();
  if (!got_slot) {
    request_abort(p, abort_reason::cancelled, "the checkpoint coordinator is stopping");
    co_return;
  }
  p.holds_commit_slot = true;
  if (id < last_completed_id_) {
    request_abort(p, abort_reason::subsumed, fmt::format("checkpoint {} completed first", last_completed_id_));
  }
  if (p.verdict) co_return;
  if (!p.prepared->done.is_set()) co_await await_prepared(p.prepared);
  if (p.prepared->failure) {
    request_abort(p, abort_reason::io_error, fmt::format("checkpoint {}: {}", id, p.prepared->failure->message()));
  }
  if (p.verdict) co_return;
  p.at = stage::committing;
  // The commit runs to its end even under stop(): a half-done commit is undone by storage anyway,
  // and the outcome must match what is on disk. stop() still ends its wait for acknowledgements.
  co_await runtime::with_stop_token(commit(id), std::stop_token{});
}

runtime::task<void> coordinator::finish(checkpoint_id id) {
  pending_checkpoint& p = pending_.at(id);
  checkpoint_outcome outcome;
  if (p.committed) {
    outcome.state = checkpoint_outcome::status::completed;
    for (const auto& ack : p.acks) {
      outcome.operator_state_bytes += ack.second.operator_state_bytes;
      outcome.channel_state_bytes += ack.second.channel_state_bytes;
    }
    last_completed_id_ = id;
  } else {
    outcome = p.verdict.value_or(
        checkpoint_outcome::aborted(abort_reason::coordinator, fmt::format("checkpoint {} ended without a verdict", id)));
  }

  // Tell every task of the checkpoint that is still registered (a removed one must hear nothing).
  for (const auto& entry : p.tasks) {
    auto now = participants_.find(entry.first);
    if (now == participants_.end() || now->second.participant != entry.second.participant) continue;
    checkpoint_participant* target = entry.second.participant;
    if (p.committed) {
      entry.second.executor->post([target, id] { target->notify_checkpoint_complete(id); });
    } else {
      entry.second.executor->post([target, id, reason = outcome.reason, detail = outcome.detail] {
        target->notify_checkpoint_aborted(id, reason, detail);
      });
    }
  }

  if (p.committed) {
    runtime::log::info("checkpoint {} completed: {} tasks, {} operator-state bytes, {} channel-state bytes", id,
                       p.tasks.size(), outcome.operator_state_bytes, outcome.channel_state_bytes);
    for (auto& [older, q] : pending_) {
      if (older < id) request_abort(q, abort_reason::subsumed, fmt::format("checkpoint {} completed first", id));
    }
  } else if (quiet(outcome.reason)) {
    runtime::log::info("checkpoint {} aborted ({}): {}", id, to_string(outcome.reason), outcome.detail);
  } else {
    runtime::log::warn("checkpoint {} aborted ({}): {}", id, to_string(outcome.reason), outcome.detail);
  }
  record(p, outcome);

  if (p.committed) {
    checkpoint_id in_progress = no_checkpoint;
    for (const auto& other : pending_) {
      if (other.first != id) in_progress = std::max(in_progress, other.first);
    }
    auto report = co_await runtime::with_stop_token(storage_->retain(in_progress), std::stop_token{});
    if (!report) runtime::log::warn("checkpoint {}: retention pass failed: {}", id, report.error().message());
  }
  if (p.holds_commit_slot) commit_slot_.release();
  if (p.waiter != nullptr) {
    p.waiter->outcome = outcome;
    p.waiter->done.set();
  }
  last_end_at_ = home_->now();
  pending_.erase(id);
  prepare_ahead();
  slot_free_.set();
}

void coordinator::record(const pending_checkpoint& p, const checkpoint_outcome& outcome) {
  checkpoint_stats s;
  s.id = p.id;
  s.mode = p.mode;
  s.triggered_at = p.triggered_at;
  s.triggered_unix_ms = p.triggered_unix_ms;
  s.duration = home_->now() - p.triggered_at;
  s.tasks = p.tasks.size();
  s.acknowledged = p.acks.size();
  s.task_breakdown.reserve(p.acks.size());
  for (const auto& ack : p.acks) {
    s.max_alignment_duration = std::max(s.max_alignment_duration, ack.second.alignment_duration);
    s.max_sync_duration = std::max(s.max_sync_duration, ack.second.sync_duration);
    s.operator_state_bytes += ack.second.operator_state_bytes;
    s.channel_state_bytes += ack.second.channel_state_bytes;
    task_checkpoint_breakdown b;
    b.task = ack.first;
    if (ack.second.snapshot_started_at) {
      // Executors cache their clock per loop turn: a task's reading may trail the trigger's by a
      // little, never by a meaningful amount; such a reading counts as no delay.
      b.start_delay = std::max(std::chrono::nanoseconds(0),
                               std::chrono::nanoseconds(*ack.second.snapshot_started_at - p.triggered_at));
    }
    b.alignment_duration = ack.second.alignment_duration;
    b.sync_duration = ack.second.sync_duration;
    b.write_duration = ack.second.write_duration;
    b.fsync_duration = ack.second.fsync_duration;
    b.operator_state_bytes = ack.second.operator_state_bytes;
    b.channel_state_bytes = ack.second.channel_state_bytes;
    b.switched_to_unaligned = p.mode == checkpoint_mode::aligned_timeout && ack.second.switched_to_unaligned;
    s.task_breakdown.push_back(b);
  }
  s.outcome = outcome;
  if (outcome.completed()) {
    last_completed_ = s;
    ++completed_count_;
  } else {
    ++aborted_count_;
  }
  if (options_.on_checkpoint_end) options_.on_checkpoint_end(s);
  history_.push_back(std::move(s));
  while (history_.size() > options_.history_size) history_.pop_front();
}

// --- stopping and queries ---------------------------------------------------------------------

runtime::task<void> coordinator::stop() {
  assert_home();
  if (stopping_) {
    if (!stopped_.is_set()) {
      const bool ignored = co_await stopped_.wait();
      (void)ignored;
    }
    co_return;
  }
  stopping_ = true;
  abort_all_pending(abort_reason::cancelled, "the checkpoint coordinator is stopping");
  slot_free_.set();
  scope_.request_stop();
  co_await scope_.join();
  co_await discard_ahead();
  while (active_calls_ > 0) {
    calls_done_.reset();
    const bool woken = co_await calls_done_.wait();
    if (!woken) break;  // our own caller was stopped
  }
  stopped_.set();
}

const std::deque<checkpoint_stats>& coordinator::stats() const {
  assert_home();
  return history_;
}

std::optional<checkpoint_stats> coordinator::last_completed() const {
  assert_home();
  return last_completed_;
}

checkpoint_id coordinator::next_checkpoint_id() const {
  assert_home();
  return next_id_;
}

std::size_t coordinator::in_flight() const {
  assert_home();
  return pending_.size();
}

std::optional<coordinator::running_checkpoint> coordinator::oldest_in_flight() const {
  assert_home();
  if (pending_.empty()) return std::nullopt;
  const pending_checkpoint& p = pending_.begin()->second;
  return running_checkpoint{p.id, p.triggered_at};
}

std::size_t coordinator::participants() const {
  assert_home();
  return participants_.size();
}

}  // namespace sluice::snapshot
