// run_job: places a job's tasks on an engine, wires their channels, runs the coordinator, and ends
// the job with a final checkpoint (job_runner.hpp).
#include "channel_wiring.hpp"
#include "settings_check.hpp"
#include "job_directories.hpp"
#include "task_slot.hpp"
#include "stream_task.hpp"

#include <sluice/buffers/local_channel.hpp>
#include <sluice/buffers/record_framing.hpp>
#include <sluice/buffers/segment.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/dataflow/job_fingerprint.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/wait_report.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/snapshot/recovery_plan.hpp>

#include <fmt/core.h>

#include <map>
#include <stdexcept>
#include <stop_token>

namespace sluice::dataflow {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;
using detail::stream_task;
using detail::task_slot;

namespace {

// A record's encoding may exceed job_settings::max_record_bytes by this much (string lengths, keys,
// window starts), so a line of exactly the maximum still travels as a record.
constexpr std::size_t record_framing_bytes = 4096;

class runner final : public detail::task_listener, public rt::wait_reporter {
 public:
  runner(job_builder& job, job_settings settings, const job_plan& plan, rt::engine& eng, bf::network_memory& memory,
         job_fingerprint identity)
      : job_(job), settings_(std::move(settings)), plan_(plan), engine_(eng), memory_(memory),
        identity_(std::move(identity)) {}
  detail::job_directories* directories = nullptr;  // locked by run_job; claimed once recovery is planned

  rt::task<job_result> run();
  // Each task's line (stream_task::describe), for a hang report (wait_report.hpp).
  void report_waits(std::string& out) const override {
    for (const task_slot& slot : slots_) out += "  " + (slot.task ? slot.task->describe() : "task (not made)") + "\n";
  }

  void data_ended(ss::task_id) override {
    if (++data_ended_ == slots_.size()) all_data_ended_.set();
  }
  void task_ended(ss::task_id id, std::optional<std::string> failure) override {
    slots_[id].ended = true;
    ++tasks_ended_;
    if (failure && final_checkpoint_done_) {
      // Everything is published and recovery would resume from the final checkpoint and change
      // nothing: the job is done; what failed while it wound down is worth a line only.
      runtime::log::warn("job {}: after the final checkpoint: {}", job_.name(), *failure);
      failure.reset();
      // The others may wait for what the failed one would still have sent (its end of data), which
      // never comes: stop them, or the job never ends (the simulation found a reset connection
      // hanging a finished join: sluice simulate --job join --seeds 19-19 --faults net).
      tasks_scope_.request_stop();
    }
    if (failure && !failure_) {
      failure_ = std::move(failure);
      runtime::log::error("job {}: {}", job_.name(), *failure_);
      tasks_scope_.request_stop();
      all_data_ended_.set();  // wakes the controller, which sees the failure
    }
    if (tasks_ended_ == slots_.size()) all_ended_.set();
  }

 private:
  rt::task<void> make_task(task_slot* slot, const ss::task_state* recovered);
  rt::task<void> restore_operators(task_slot* slot, std::optional<std::string>* problem);
  rt::task<std::optional<std::string>> restore_problem(const ss::recovery_plan& plan);
  rt::task<void> destroy(task_slot* slot);
  rt::task<void> controller();
  rt::task<void> run_task(task_slot* slot);
  rt::task<void> run_helpers(task_slot* slot);
  rt::task<void> sample(task_slot* slot, job_progress* p);
  rt::task<job_progress> progress();
  rt::task<void> report_progress();
  rt::task<void> wait_all_ended() { co_await all_ended_.wait(); }

  job_builder& job_;
  job_settings settings_;
  const job_plan& plan_;
  rt::engine& engine_;
  bf::network_memory& memory_;
  job_fingerprint identity_;  // job_fingerprint.hpp
  std::optional<ss::checkpoint_storage> storage_;
  std::optional<ss::coordinator> coordinator_;
  std::vector<task_slot> slots_;
  std::optional<detail::channel_wiring> wiring_;
  std::size_t data_ended_ = 0;
  std::size_t tasks_ended_ = 0;
  std::uint64_t buffer_violations_ = 0;  // counted by the pools of destroyed tasks
  std::string credit_violation_;         // the first gate whose credit identity failed at its end
  std::optional<std::string> failure_;
  bool final_checkpoint_done_ = false;
  rt::event all_data_ended_;
  rt::event all_ended_;
  rt::scope tasks_scope_;
  std::chrono::steady_clock::time_point started_{};
};

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
  w.coordinator = &*coordinator_;
  w.storage = &*storage_;
  w.mode = settings_.mode;
  w.alignment_timeout = settings_.alignment_timeout;
  w.gate = slot->gate.get();
  w.partition = slot->partition.get();
  w.recovered = recovered;
  w.max_record_bytes = settings_.max_record_bytes + record_framing_bytes;
  slot->task = std::make_unique<stream_task>(std::move(w), std::move(b));
  co_return;
}

rt::task<void> runner::restore_operators(task_slot* slot, std::optional<std::string>* problem) {
  *problem = slot->task->restore_operators();
  co_return;
}

// Why the recovered state does not restore, if it does not: a task's operator state does not
// decode, or a channel's recovered stream (the consumer's input state, then the producer's output
// state for it) is not whole records.
rt::task<std::optional<std::string>> runner::restore_problem(const ss::recovery_plan& plan) {
  if (!plan.checkpoint) co_return std::nullopt;
  for (task_slot& slot : slots_) {
    std::optional<std::string> problem;
    co_await rt::run_on(slot.executor, restore_operators(&slot, &problem));
    if (problem) co_return problem;
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

rt::task<void> runner::run_task(task_slot* slot) { co_await rt::run_on(slot->executor, slot->task->run()); }

namespace {
rt::task<void> join_all(std::vector<rt::task<void>> jobs) { co_await rt::when_all(std::move(jobs)); }
}  // namespace

// The partition's flusher and senders, and the gate's credit pump: they end with the data.
rt::task<void> runner::run_helpers(task_slot* slot) {
  std::vector<rt::task<void>> jobs;
  if (slot->partition) jobs.push_back(slot->partition->run_flusher());
  for (auto& s : slot->senders) jobs.push_back(s->sender().run());
  if (slot->pump) jobs.push_back(slot->pump->run());
  co_await rt::run_on(slot->executor, join_all(std::move(jobs)));
}

rt::task<void> runner::controller() {
  co_await all_data_ended_.wait();
  if (failure_) co_return;
  // The final checkpoint, once every task has passed on all it will emit: every sink publishes what
  // it staged. (A source's sending stays open until then: barriers still flow.)
  for (int attempt = 1;; ++attempt) {
    ss::checkpoint_outcome outcome = co_await coordinator_->trigger_now();
    if (outcome.completed()) {
      final_checkpoint_done_ = !failure_;
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
  for (task_slot& slot : slots_) {
    if (slot.task->is_source()) {
      stream_task* t = slot.task.get();
      slot.executor->post([t] { t->finish_input(); });
    }
  }
}

rt::task<void> runner::sample(task_slot* slot, job_progress* p) {
  if (slot->task->is_source()) {
    // (the source's count lives in its head; records_in counts what non-sources took)
  } else {
    p->records_in += slot->task->records_in();
  }
  if (slot->partition && !slot->partition->finished() && !slot->partition->writable()) p->backpressure += 1;
  co_return;
}

rt::task<job_progress> runner::progress() {
  job_progress p;
  std::size_t partitions = 0;
  for (task_slot& slot : slots_) {
    if (!slot.task) continue;
    partitions += slot.partition ? 1 : 0;
    co_await rt::run_on(slot.executor, sample(&slot, &p));
  }
  p.backpressure = partitions > 0 ? p.backpressure / static_cast<double>(partitions) : 0;
  p.elapsed = engine_.at(0).now() - started_;
  p.checkpoints_completed = coordinator_->completed_count();
  p.checkpoints_aborted = coordinator_->aborted_count();
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
    settings_.on_progress(p);
  }
}

rt::task<job_result> runner::run() {
  job_result result;
  started_ = engine_.at(0).now();
  // --- placement (job_plan.hpp) ------------------------------------------------------------------
  slots_.resize(plan_.tasks().size());
  for (const task_plan& t : plan_.tasks()) {
    task_slot& slot = slots_[t.id];
    slot.id = t.id;
    slot.stage = t.stage;
    slot.subtask = t.subtask;
    slot.executor_index = t.executor;
    slot.executor = &engine_.at(t.executor);
  }

  // --- recovery -------------------------------------------------------------------------------
  // The newest checkpoint that validates and restores: its tasks are made and their state restored
  // (and every channel's recovered stream checked) before any task runs, so a checkpoint that does
  // not restore is found before anything is published, and the one before it is tried.
  storage_.emplace(settings_.checkpoint_dir, ss::storage_options{settings_.retained_checkpoints});
  std::map<ss::checkpoint_id, std::string> rejected;
  std::optional<ss::recovery_plan> plan;
  for (;;) {
    io::result<ss::recovery_plan> planned = co_await ss::plan_recovery(*storage_, rejected);
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
    copts.min_pause = settings_.checkpoint_interval / 2;
    copts.mode = settings_.mode;
    copts.alignment_timeout = settings_.alignment_timeout;
    copts.checkpoint_timeout = settings_.checkpoint_timeout;
    copts.expected_tasks = slots_.size();
    copts.first_checkpoint_id = plan->next_checkpoint_id;
    copts.verify_state_files = false;
    copts.on_checkpoint_end = settings_.on_checkpoint;
    copts.job_metadata = fingerprint_metadata(identity_);
    coordinator_.reset();
    coordinator_.emplace(engine_.at(0), *storage_, copts);
    for (task_slot& slot : slots_) {
      const ss::task_state* recovered = nullptr;
      if (auto it = plan->tasks.find(slot.id); it != plan->tasks.end()) recovered = &it->second.state;
      co_await rt::run_on(slot.executor, make_task(&slot, recovered));
    }
    std::optional<std::string> problem = co_await restore_problem(*plan);
    if (!problem) break;
    const ss::checkpoint_id bad = plan->recovered_id();
    runtime::log::warn("job {}: checkpoint {} does not restore: {}; trying the checkpoint before it", job_.name(), bad,
                       *problem);
    rejected.emplace(bad, std::move(*problem));
    for (task_slot& slot : slots_) co_await rt::run_on(slot.executor, destroy(&slot));
  }
  if (plan->checkpoint) {
    result.resumed_from = plan->recovered_id();
    runtime::log::info("job {}: resuming from checkpoint {}", job_.name(), *result.resumed_from);
  }
  if (io::result<void> claimed = directories->claim_outputs(plan->checkpoint.has_value()); !claimed) {
    for (task_slot& slot : slots_) co_await rt::run_on(slot.executor, destroy(&slot));
    result.buffer_violations = buffer_violations_;
  result.credit_violation = credit_violation_;
    result.exit_code = 2;
    result.message = claimed.error().message();
    co_return result;
  }
  // What earlier runs left (aborted checkpoints, a full disk's partial state files) goes now; the
  // checkpoint resumed from is never touched.
  io::result<ss::retention_report> tidied = co_await storage_->retain(plan->recovered_id(), true);
  if (!tidied) {
    runtime::log::warn("job {}: start-up retention: {}", job_.name(), tidied.error().message());
  }

  // --- channels -----------------------------------------------------------------------------------
  wiring_.emplace(plan_, slots_, engine_, detail::wiring_options{});
  io::result<void> wired = co_await wiring_->connect();
  if (!wired) {
    co_await wiring_->close();
    for (task_slot& slot : slots_) co_await rt::run_on(slot.executor, destroy(&slot));
    result.exit_code = 1;
    result.message = "channels: " + wired.error().message();
    co_return result;
  }
  for (task_slot& slot : slots_) coordinator_->add_participant(*slot.task);
  coordinator_->start();

  // --- run ------------------------------------------------------------------------------------------
  for (task_slot& slot : slots_) {
    tasks_scope_.spawn(run_task(&slot));
    tasks_scope_.spawn(run_helpers(&slot));
  }
  tasks_scope_.spawn(controller());
  if (settings_.on_progress) tasks_scope_.spawn(report_progress());
  co_await tasks_scope_.join();

  // --- end ----------------------------------------------------------------------------------------
  result.final = co_await progress();
  co_await coordinator_->stop();
  for (task_slot& slot : slots_) co_await coordinator_->remove_participant(slot.id, "job ended");
  if (!failure_) co_await wiring_->wait_remote_closed();
  co_await wiring_->close();
  for (task_slot& slot : slots_) co_await rt::run_on(slot.executor, destroy(&slot));
  result.buffer_violations = buffer_violations_;
  result.credit_violation = credit_violation_;
  if (failure_) {
    result.exit_code = 1;
    result.message = *failure_;
  }
  co_return result;
}

}  // namespace

job_result run_job(job_builder& job, job_settings settings) {
  // Under a simulation, even the start-up's file reads and locks are the simulated machine's.
  std::optional<rt::system_scope> simulated;
  if (settings.simulation != nullptr) {
    simulated.emplace(settings.simulation->kernel());
    settings.handle_signals = false;
  }
  detail::check_settings(settings);
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 1,
                                                       .executors = settings.executors,
                                                       .transport = settings.transport,
                                                       .floating_buffers = settings.floating_buffers});
  // The job's identity, before any executor runs (it reads every input, blocking).
  job_fingerprint identity;
  try {
    identity = fingerprint_job(job);
  } catch (const job_refused& e) {
    return job_result{.exit_code = e.exit_code(), .message = e.what(), .resumed_from = {}, .final = {}};
  }
  // Start-up, before any executor runs: the checkpoint and output directories, made and locked until
  // this call returns; a refusal is exit code 2 (job_directories.hpp).
  io::result<detail::job_directories> dirs =
      detail::job_directories::lock(job.name(), settings.checkpoint_dir, job.output_dirs());
  if (!dirs) return job_result{.exit_code = 2, .message = dirs.error().message()};
  const std::size_t segment_bytes = settings.segment_bytes;
  const std::size_t per_executor = plan.segments_per_executor();
  bf::network_memory memory(per_executor * settings.executors * segment_bytes, segment_bytes, settings.executors);

  job_result result;
  {
    rt::engine eng({.executors = settings.executors,
                    .handle_signals = settings.handle_signals,
                    .simulation = settings.simulation});
    const std::stop_token stop = settings.stop;
    auto r = std::make_unique<runner>(job, std::move(settings), plan, eng, memory, std::move(identity));
    const rt::wait_report_scope reporting(*r);
    r->directories = &dirs.value();
    {
      std::stop_callback on_stop(stop, [&eng] { eng.request_stop(); });
      result = eng.block_on(r->run());
    }
    if (eng.stop_signal() != 0) {
      result.exit_code = 130;
      result.message = fmt::format("stopped by signal {}", eng.stop_signal());
    } else if (stop.stop_requested() && result.exit_code == 0 && result.message.empty()) {
      result.exit_code = 130;
      result.message = "stopped by request";
    }
    eng.stop();
    r.reset();  // after every executor stopped: nothing is posted to its parts any more
  }
  for (std::size_t e = 0; e < memory.executors(); ++e) {
    result.leaked_segments += memory.pool(e).total_segments() - memory.pool(e).free_segments();
  }
  return result;
}

}  // namespace sluice::dataflow
