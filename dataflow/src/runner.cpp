// See runner.hpp.

#include "runner.hpp"

#include <sluice/buffers/local_channel.hpp>
#include <sluice/buffers/record_framing.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/offload.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <fmt/core.h>

#include <coroutine>
#include <map>
#include <optional>
#include <stdexcept>

namespace sluice::dataflow::detail {

namespace {
// Continues the awaiting coroutine through `target`'s inbox, even when already there, so whatever
// this thread posted to `target` before has run by then (the inbox is FIFO per sender).
struct inbox_hop {
  rt::executor* target;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const {
    rt::executor* ex = target;
    ex->post([ex, h] { ex->schedule(h); });
  }
  void await_resume() const noexcept {}
};
}  // namespace

rt::task<void> runner::make_task(task_slot* slot, const ss::task_state* recovered) {
  const stage_def& stage = job_.stages()[slot->stage];
  const task_plan& planned = plan_.task(slot->id);
  const task_buffers& budget = planned.buffers;  // the memory budget (job_plan.hpp)
  const std::size_t downstream_parallelism = planned.downstream_parallelism;
  if (downstream_parallelism > 0) {
    slot->out_pool = std::make_unique<bf::local_buffer_pool>(memory_.pool(slot->executor_index), 1, budget.output);
    slot->partition = std::make_unique<bf::result_partition>(
        *slot->out_pool, bf::partition_options{.subpartitions = downstream_parallelism,
                                                .flush_timeout = settings_.flush_timeout,
                                                .max_record_bytes = settings_.max_record_bytes + record_framing_bytes});
    slot->priority_pool = std::make_unique<bf::local_buffer_pool>(memory_.pool(slot->executor_index), 1, budget.priority);
    slot->partition->set_priority_event_pool(*slot->priority_pool);
  }
  std::vector<std::size_t> input_channels = planned.input_channels;
  if (!input_channels.empty()) {
    std::size_t channels = 0;
    for (std::size_t n : input_channels) channels += n;
    slot->in_pool = std::make_unique<bf::local_buffer_pool>(memory_.pool(slot->executor_index), budget.exclusive,
                                                            budget.exclusive + budget.floating);
    slot->gate = std::make_unique<bf::input_gate>(
        *slot->in_pool, bf::gate_options{.channels = channels, .exclusive_per_channel = 2, .floating = budget.floating});
    slot->pump = std::make_unique<bf::gate_credit_pump>(*slot->gate);
  }
  task_builder b(slot->id, slot->subtask, stage.parallelism, slot->partition.get(), downstream_parallelism,
                 std::move(input_channels));
  b.set_max_record_bytes(settings_.max_record_bytes);
  b.set_input_sizes(input_sizes(identity_, slot->stage));  // the sources read their inputs as fingerprinted
  b.set_names(job_.name(), stage.name);
  b.set_key_groups(stage.key_groups);
  b.set_outputs(plan_.stages()[slot->stage].outputs);
  stage.build(b);
  if (b.output_ == nullptr || (b.source_ == nullptr) == (b.input_ == nullptr)) {
    throw std::logic_error(fmt::format("stage '{}' built an incomplete chain", stage.name));
  }
  if (b.on_fiber_ && b.source_ != nullptr) {
    throw std::invalid_argument(fmt::format(
        "stage '{}': a blocking operator cannot run in a source stage; put it after key_by(...).partition(...)",
        stage.name));
  }
  detail::task_wiring w;
  w.id = slot->id;
  w.name = fmt::format("{}#{}", stage.name, slot->subtask);
  w.executor = slot->executor;
  w.runner = &engine_.at(0);
  w.listener = this;
  w.coordinator = &acknowledger();
  w.storage = &*storage_;
  w.mode = settings_.mode;
  w.alignment_timeout = settings_.alignment_timeout;
  w.gate = slot->gate.get();
  w.partition = slot->partition.get();
  w.recovered = recovered;
  w.max_record_bytes = settings_.max_record_bytes + record_framing_bytes;
  w.await_finish = !coordinating();  // a follower's (stream_task.hpp)
  slot->task = std::make_unique<stream_task>(std::move(w), std::move(b));
  co_return;
}

// On a fiber: a large table restores in paced slices (runtime::pace_point), the executor running
// its other coroutines between them.
rt::task<void> runner::restore_operators(task_slot* slot, std::optional<std::string>* problem) {
  rt::task<void> restored = rt::run_fiber([slot, problem] { *problem = slot->task->restore_operators(); },
                                          detail::paced_fiber);
  co_await std::move(restored);
}

// Why the recovered state does not restore, if it does not: a task's operator state does not
// decode (the first such task in task order), or a channel's recovered stream (the consumer's input
// state, then the producer's output state for it) is not whole records. Every task's operators
// restore at once, each task on its own executor: a large table's restore is most of a recovery,
// and tasks on different executors then restore in parallel.
rt::task<std::optional<std::string>> runner::restore_problem(const ss::recovery_plan& plan) {
  if (!plan.checkpoint) co_return std::nullopt;
  std::vector<std::optional<std::string>> problems(mine_.size());
  std::vector<rt::task<void>> restores;
  restores.reserve(mine_.size());
  for (std::size_t i = 0; i < mine_.size(); ++i) {
    restores.push_back(rt::run_on(mine_[i]->executor, restore_operators(mine_[i], &problems[i])));
  }
  co_await rt::when_all(std::move(restores));
  for (std::optional<std::string>& problem : problems) {
    if (problem) co_return std::move(problem);
  }
  const auto state_of = [&plan](ss::task_id id) -> const ss::task_state* {
    auto it = plan.tasks.find(id);
    return it == plan.tasks.end() ? nullptr : &it->second.state;
  };
  for (const task_plan& consumer : plan_.tasks()) {
    for (const channel_plan& c : plan_.inputs_of(consumer.id)) {
      bf::record_framing framing(settings_.max_record_bytes + record_framing_bytes);
      if (const ss::task_state* in = state_of(c.consumer)) {
        if (auto it = in->input_channels.find({0, c.gate_channel}); it != in->input_channels.end()) {
          framing.feed(it->second);
        }
      }
      if (const ss::task_state* out = state_of(c.producer)) {
        const ss::channel_key sub{0, c.subpartition};
        if (auto it = out->output_channels.find(sub); it != out->output_channels.end()) framing.feed(it->second);
      }
      if (std::optional<std::string> fault = framing.finish()) {
        co_return fmt::format("the channel state from task {} to task {} (input channel {}): {}", c.producer,
                              c.consumer, c.gate_channel, *fault);
      }
    }
  }
  co_return std::nullopt;
}

rt::task<void> runner::destroy(task_slot* slot) {
  slot->task.reset();
  slot->pump.reset();
  // Quiescent: the gate's credit identity (input_gate.hpp) holds here too (the simulation checks).
  if (std::string broken = slot->gate ? slot->gate->check_credit_accounting() : ""; !broken.empty()) {
    if (credit_violation_.empty()) credit_violation_ = fmt::format("task {}: {}", slot->id, broken);
  }
  slot->gate.reset();
  // Buffers this task's consumers released come home by post: let them arrive.
  const auto in_use = [slot] {
    return (slot->out_pool ? slot->out_pool->in_use() : 0) + (slot->priority_pool ? slot->priority_pool->in_use() : 0);
  };
  for (int i = 0; i < 100'000 && in_use() > 0; ++i) co_await rt::yield();
  for (const auto* pool : {slot->out_pool.get(), slot->priority_pool.get(), slot->in_pool.get()}) {
    if (pool != nullptr) buffer_violations_ += pool->violations();  // read on exec 0 after this run_on ends
  }
  slot->partition.reset();
  slot->in_pool.reset();
  slot->out_pool.reset();
  slot->priority_pool.reset();
}

// On executor 0, as each checkpoint ends: the user's callback, and the count of failures in a row.
void runner::checkpoint_ended(const ss::checkpoint_stats& stats) {
  if (metrics_) metrics_->checkpoint_ended(stats);
  if (settings_.on_checkpoint) {
    if (!host_.post([this, stats] { settings_.on_checkpoint(stats); })) {
      runtime::log::warn("job {}: on_checkpoint of checkpoint {} dropped: {} host callbacks wait", job_.name(),
                         stats.id, rt::host_calls::default_capacity);
    }
  }
  if (history_) history_->checkpoint_ended(stats);
  if (stats.outcome.completed()) {
    failures_in_a_row_ = 0;
    return;
  }
  if (stats.outcome.reason == ss::abort_reason::cancelled) return;  // the job is stopping anyway
  ++failures_in_a_row_;
  const std::optional<unsigned> tolerated = settings_.tolerable_checkpoint_failures;
  if (!tolerated || failures_in_a_row_ <= *tolerated || failure_ || final_checkpoint_done_) return;
  fail_job(fmt::format("{} checkpoints in a row failed (job_settings::tolerable_checkpoint_failures is {}); the "
                       "last, checkpoint {}: {} ({})",
                       failures_in_a_row_, *tolerated, stats.id, ss::to_string(stats.outcome.reason),
                       stats.outcome.detail));
}

ss::checkpoint_acknowledger& runner::acknowledger() {
  if (coordinating()) return *coordinator_;
  return link_->leader_acknowledger();
}

rt::task<void> runner::watch_link() {
  std::string why = co_await link_->ended();
  if (why.empty() || failure_ || final_checkpoint_done_) co_return;  // stopped, or already ending
  failure_ = std::move(why);
  runtime::log::error("job {}: {}", job_.name(), *failure_);
  tasks_scope_.request_stop();
  all_data_ended_.set();
}

// A follower's tasks all await the order (task_wiring::await_finish); elsewhere only sources do.
rt::task<void> runner::finish_sources() {
  for (task_slot* slot : mine_) {
    if (slot->task->is_source() || !coordinating()) {
      stream_task* t = slot->task.get();
      slot->executor->post([t] { t->finish_input(); });
    }
  }
  co_return;
}

rt::task<void> runner::controller() {
  if (!coordinating()) {
    // A follower's sources end when the leader's final checkpoint completed, and its other tasks
    // end then too (not on their end of data, which may come from other workers before the leader's
    // word that the checkpoint completed: task_wiring::await_finish). The link posted that word to
    // every task before it resolves this wait, and finish_sources posts after it, from the same
    // executor: each task hears the completion first.
    co_await link_->finish_requested();
    if (failure_ || (tasks_scope_.token() != nullptr && tasks_scope_.token()->stop_requested())) co_return;
    final_checkpoint_done_ = true;
    co_await finish_sources();
    co_return;
  }
  co_await all_data_ended_.wait();
  if (failure_ || stopping_ || draining_) co_return;  // (a drain takes its own checkpoint: runner_stop.cpp)
  if (link_ != nullptr) {
    co_await link_->all_data_ended();  // every worker's tasks too
    if (failure_ || (tasks_scope_.token() != nullptr && tasks_scope_.token()->stop_requested())) co_return;
  }
  // The final checkpoint, once every task has passed on all it will emit: every sink publishes what
  // it staged. (A source's sending stays open until then: barriers still flow.)
  final_checkpoint_started_ = true;
  coordinator_->stop_periodic();  // the final checkpoint is the last: none after it, only to be cancelled
  for (int attempt = 1;; ++attempt) {
    ss::checkpoint_outcome outcome = co_await coordinator_->trigger_now();
    if (outcome.completed()) {
      final_checkpoint_done_ = !failure_;
      final_checkpoint_id_ = coordinator_->last_completed()->id;  // (the newest: nothing completes after it)
      break;
    }
    // (cancelled: the job is stopping, by a signal or another task's failure)
    if (failure_ || outcome.reason == ss::abort_reason::cancelled) co_return;
    if (attempt == 5) {
      failure_ = fmt::format("the final checkpoint failed 5 times, last: {} ({})", ss::to_string(outcome.reason),
                             outcome.detail);
      tasks_scope_.request_stop();
      co_return;
    }
    runtime::log::warn("job {}: final checkpoint aborted ({}: {}); retrying", job_.name(), ss::to_string(outcome.reason),
                       outcome.detail);
    const bool waited = co_await rt::sleep_for(std::chrono::milliseconds(50 << (attempt - 1)));  // 50, 100, 200, 400 ms
    if (!waited) co_return;  // stopping
  }
  if (link_ != nullptr) {
    // The coordinator posted the final checkpoint's completion to every participant before it
    // resolved trigger_now; a remote one's (here, on executor 0) turns into c/<id> in the link's
    // outbox. It must be there before `f`: a follower's tasks commit on the one and end on the
    // other (task_wiring::await_finish). The coordinator's retention pass in between suspends, so
    // it is; this hop makes it so whatever the coordinator does there.
    co_await inbox_hop{&engine_.at(0)};
    link_->finish();
  }
  co_await finish_sources();
}

rt::task<void> runner::sample(task_slot* slot, job_progress* p) {
  if (slot->task->is_source()) {  // (records_in counts what non-sources took)
    p->source_records += slot->task->records_produced();
    if (const std::optional<source_head::position> at = slot->task->input_position()) {
      p->input_done += at->done;
      p->input_total += at->total;
    }
  } else {
    p->records_in += slot->task->records_in();
  }
  p->records_written += slot->task->records_written();
  if (slot->partition && !slot->partition->finished() && !slot->partition->writable()) p->backpressure += 1;
  co_return;
}

rt::task<job_progress> runner::progress() {
  job_progress p;
  std::size_t partitions = 0;
  for (task_slot* slot : mine_) {
    if (!slot->task) continue;
    partitions += slot->partition ? 1 : 0;
    co_await rt::run_on(slot->executor, sample(slot, &p));
  }
  p.backpressure = partitions > 0 ? p.backpressure / static_cast<double>(partitions) : 0;
  p.elapsed = engine_.at(0).now() - started_;
  if (!coordinator_) co_return p;
  p.checkpoints_completed = coordinator_->completed_count();
  p.checkpoints_aborted = coordinator_->aborted_count();
  if (const std::optional<ss::coordinator::running_checkpoint> running = coordinator_->oldest_in_flight()) {
    p.running_checkpoint = running->id;
    p.running_checkpoint_age = engine_.at(0).now() - running->triggered_at;
  }
  if (std::optional<ss::checkpoint_stats> last = coordinator_->last_completed()) {
    p.last_checkpoint = last->id;
    p.last_checkpoint_duration = last->duration;
    p.last_checkpoint_bytes = last->operator_state_bytes + last->channel_state_bytes;
  }
  co_return p;
}

rt::task<void> runner::report_progress() {
  while (!all_ended_.is_set()) {
    const bool done = co_await rt::with_timeout(wait_all_ended(), settings_.progress_interval);
    if (done) break;
    job_progress p = co_await progress();
    host_.post_latest(0, [this, p] { settings_.on_progress(p); });  // a slow host sees the newest only
  }
}

rt::task<job_result> runner::run() {
  job_result result = co_await run_tasks();
  co_await host_.drained();  // the host's last callbacks (a final on_checkpoint) have returned
  co_return result;
}

rt::task<job_result> runner::run_tasks() {
  job_result result;
  started_ = engine_.at(0).now();
  // --- placement (job_plan.hpp) ------------------------------------------------------------------
  slots_.resize(plan_.tasks().size());
  for (const task_plan& t : plan_.tasks()) {
    task_slot& slot = slots_[t.id];
    slot.id = t.id;
    slot.stage = t.stage;
    slot.subtask = t.subtask;
    if (t.worker != (link_ != nullptr ? link_->worker() : 0)) continue;  // another worker's
    slot.executor_index = t.executor;
    slot.executor = &engine_.at(t.executor);
    mine_.push_back(&slot);
  }
  // The metrics endpoint is bound before any task is made: a port in use refuses the job (exit 2).
  if (!settings_.metrics_address.empty()) {
    endpoint_sources from;
    from.job = job_.name();
    from.tasks = &mine_;
    from.engine = &engine_;
    from.memory = &memory_;
    from.coordinator = &coordinator_;
    from.builder = &job_;
    from.plan = &plan_;
    from.worker = link_ != nullptr ? link_->worker() : 0;
    from.checkpoints = checkpoint_settings_of(settings_);
    from.keeps_history = coordinating() && settings_.checkpoint_history_entries > 0;
    from.state = [this] { return stopping_ ? "stopping" : draining_ ? "draining" : "running"; };
    from.progress = [this] { return progress(); };
    io::result<std::unique_ptr<job_metrics>> bound = job_metrics::bind(settings_.metrics_address, std::move(from));
    if (!bound) {
      result.exit_code = 2;
      result.message = bound.error().message();
      co_return result;
    }
    metrics_ = std::move(bound).value();
  }

  // --- recovery -------------------------------------------------------------------------------
  // The newest checkpoint that validates and restores: its tasks are made and their state restored
  // (and every channel's recovered stream checked) before any task runs, so a checkpoint that does
  // not restore is found before anything is published, and the one before it is tried.
  storage_.emplace(settings_.checkpoint_dir, ss::storage_options{settings_.retained_checkpoints});
  std::map<ss::checkpoint_id, std::string> rejected;
  std::optional<ss::recovery_plan> plan;
  for (;;) {
    const ss::checkpoint_id newest_allowed = link_ != nullptr ? link_->newest_allowed() : ss::max_checkpoint_id;
    io::result<ss::recovery_plan> planned = co_await ss::plan_recovery(*storage_, rejected, newest_allowed);
    if (!planned) {
      // Ids exhausted is a refusal (a new checkpoint directory is the fix); an I/O error fails.
      result.exit_code = planned.error().code() == std::errc::value_too_large ? 2 : 1;
      result.message = planned.error().message();
      co_return result;
    }
    plan.emplace(std::move(planned).value());
    // A checkpoint of another job or other arguments is refused before any task exists.
    if (std::optional<std::string> refused = resume_refusal(identity_, *plan, settings_.checkpoint_dir)) {
      result.exit_code = 2;
      result.message = std::move(*refused);
      co_return result;
    }
    ss::coordinator_options copts;
    copts.interval = settings_.checkpoint_interval;
    copts.min_pause = settings_.min_pause.value_or(settings_.checkpoint_interval / 2);
    copts.mode = settings_.mode;
    copts.alignment_timeout = settings_.alignment_timeout;
    copts.checkpoint_timeout = settings_.checkpoint_timeout;
    copts.expected_tasks = slots_.size();
    copts.first_checkpoint_id = plan->next_checkpoint_id;
    if (link_ != nullptr) {
      copts.first_checkpoint_id = std::max(copts.first_checkpoint_id, link_->first_free_id());
      cluster_link* link = link_;
      copts.reserve_ids = [link](ss::checkpoint_id up_to) { return link->reserve_ids(up_to); };
      copts.publish = [link](ss::checkpoint_id id) { return link->publish(id); };
    }
    copts.verify_state_files = false;
    copts.on_checkpoint_end = [this](const ss::checkpoint_stats& stats) { checkpoint_ended(stats); };
    copts.job_metadata = fingerprint_metadata(identity_);
    coordinator_.reset();
    if (coordinating()) coordinator_.emplace(engine_.at(0), *storage_, copts);
    for (task_slot* slot : mine_) {
      const ss::task_state* recovered = nullptr;
      if (auto it = plan->tasks.find(slot->id); it != plan->tasks.end()) recovered = &it->second.state;
      co_await rt::run_on(slot->executor, make_task(slot, recovered));
    }
    std::optional<std::string> problem = co_await restore_problem(*plan);
    if (!problem) break;
    const ss::checkpoint_id bad = plan->recovered_id();
    runtime::log::warn("job {}: checkpoint {} does not restore: {}; trying the checkpoint before it", job_.name(), bad,
                       *problem);
    if (link_ != nullptr) {
      // Every worker must resume from the same checkpoint: the job restarts (the leader's choice).
      for (task_slot* slot : mine_) co_await rt::run_on(slot->executor, destroy(slot));
      result.exit_code = 1;
      result.message = fmt::format("checkpoint {} does not restore: {}", bad, *problem);
      link_->failed(result.message);
      co_return result;
    }
    rejected.emplace(bad, std::move(*problem));
    for (task_slot* slot : mine_) co_await rt::run_on(slot->executor, destroy(slot));
  }
  const std::chrono::nanoseconds restore_duration = engine_.at(0).now() - started_;  // for the history
  if (plan->checkpoint) {
    result.resumed_from = plan->recovered_id();
    runtime::log::info("job {}: resuming from checkpoint {}", job_.name(), *result.resumed_from);
  }
  if (link_ != nullptr) {
    const job_plan* placed = &plan_;
    const unsigned me = link_->worker();
    directories->set_own_tasks([placed, me](std::uint64_t task) {
      return task < placed->tasks().size() && placed->task(static_cast<ss::task_id>(task)).worker == me;
    });
  }
  // Listings, marker reads and writes, fsyncs: blocking calls, on the blocking-work pool (a slow
  // shared filesystem stalls this start, not the executor's other coroutines).
  std::optional<io::result<void>> claimed;
  const bool resuming = plan->checkpoint.has_value();
  auto claim = [&claimed, held = directories, resuming] { claimed.emplace(held->claim_outputs(resuming)); };
  co_await rt::offload(claim);
  if (!*claimed) {
    for (task_slot* slot : mine_) co_await rt::run_on(slot->executor, destroy(slot));
    result.buffer_violations = buffer_violations_;
    result.credit_violation = credit_violation_;
    result.exit_code = 2;
    result.message = claimed->error().message();
    co_return result;
  }
  // What earlier runs left (aborted checkpoints, a full disk's partial state files) goes now; the
  // checkpoint resumed from is never touched.
  if (coordinating()) {  // (only the leader tidies a directory the workers share)
    io::result<ss::retention_report> tidied = co_await storage_->retain(plan->recovered_id(), true);
    if (!tidied) {
      runtime::log::warn("job {}: start-up retention: {}", job_.name(), tidied.error().message());
    }
  }

  // --- channels -----------------------------------------------------------------------------------
  detail::wiring_options wiring;
  if (link_ != nullptr) {
    wiring.worker = link_->worker();
    wiring.listen = link_->listen();
    wiring.workers = link_->peers();
    wiring.transport = link_->transport();
    cluster_link* link = link_;
    wiring.before_dialing = [link] { return link->ports_ready(); };
  }
  wiring_.emplace(plan_, slots_, engine_, std::move(wiring));
  io::result<void> wired = co_await wiring_->connect();
  if (!wired) {
    co_await wiring_->close();
    wiring_closed_ = true;
    for (task_slot* slot : mine_) co_await rt::run_on(slot->executor, destroy(slot));
    result.exit_code = 1;
    result.message = "channels: " + wired.error().message();
    if (link_ != nullptr) link_->failed(result.message);
    co_return result;
  }
  if (coordinating()) {
    for (task_slot* slot : mine_) coordinator_->add_participant(*slot->task);
    if (link_ != nullptr) {
      for (ss::checkpoint_participant* remote : link_->remote_tasks(*coordinator_)) coordinator_->add_participant(*remote);
    }
    coordinator_->start();
  } else {
    for (task_slot* slot : mine_) link_->attach_local(*slot->task);
  }
  if (coordinating() && settings_.checkpoint_history_entries > 0) {
    history_.emplace(settings_.checkpoint_dir, settings_.checkpoint_history_entries, task_names(job_, plan_));
    history_->job_started(job_.name(), result.resumed_from, restore_duration);
  }
  // Restored, wired and about to run: the host may say the job is up (READY=1, say).
  if (on_ready) on_ready(result.resumed_from);
  if (settings_.on_ready) host_.post([this, from = result.resumed_from] { settings_.on_ready(from); });
  std::function<void(std::uint16_t)> listening;
  if (settings_.on_metrics_listening) {
    listening = [this](std::uint16_t port) { host_.post([this, port] { settings_.on_metrics_listening(port); }); };
  }
  if (metrics_) metrics_->start(result.resumed_from, restore_duration, std::move(listening));

  // --- run ------------------------------------------------------------------------------------------
  for (task_slot* slot : mine_) {
    tasks_scope_.spawn(run_task(slot));
    tasks_scope_.spawn(run_helpers(slot));
  }
  tasks_scope_.spawn(guarded(controller(), "controller"));
  tasks_running_ = true;
  start_requested_stop();  // a stop asked for before the tasks ran (runner_stop.cpp)
  if (link_ != nullptr) link_scope_.spawn(watch_link());
  if (settings_.on_progress) tasks_scope_.spawn(guarded(report_progress(), "progress reports"));
  co_await tasks_scope_.join();
  link_scope_.request_stop();
  co_await link_scope_.join();
  if (metrics_) co_await metrics_->stop();  // before any task is destroyed

  // --- end ----------------------------------------------------------------------------------------
  try {
    result.final = co_await progress();
  } catch (const std::exception& e) {  // (out of memory: the figures only, the end goes on without them)
    runtime::log::warn("job {}: the final figures: {}", job_.name(), e.what());
  }
  if (coordinator_) {
    co_await coordinator_->stop();
    for (const task_plan& t : plan_.tasks()) co_await coordinator_->remove_participant(t.id, "job ended");
  }
  if (history_) co_await history_->close();  // the last checkpoint's line written
  // Only a job that ended by its data waits for its remote inputs to close: then every producer
  // finishes its partition (end-of-partition closes the channel). A stopped job's producers stopped
  // where they were and never will: waiting for them hung every stop over tcp channels for good.
  if (ended_by_data()) co_await wiring_->wait_remote_closed();
  co_await wiring_->close();
  wiring_closed_ = true;
  for (task_slot* slot : mine_) co_await rt::run_on(slot->executor, destroy(slot));
  result.buffer_violations = buffer_violations_;
  result.credit_violation = credit_violation_;
  if (failure_) {
    result.exit_code = 1;
    result.message = *failure_;
  } else if (stopped_at_) {
    result.stopped_at = stopped_at_;
    result.message = fmt::format("stopped with checkpoint {} (resumable)", *stopped_at_);
  } else if (stopping_) {
    result.exit_code = 130;
    result.message = "stopped by request";
  }
  co_return result;
}

}  // namespace sluice::dataflow::detail
