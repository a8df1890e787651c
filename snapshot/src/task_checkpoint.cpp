// One task's side of a checkpoint (task_checkpoint.hpp).

#include <sluice/snapshot/task_checkpoint.hpp>

#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cassert>
#include <utility>

namespace sluice::snapshot {

namespace bf = sluice::buffers;

task_checkpoint::task_checkpoint(task_checkpoint_options options, checkpoint_subject& subject)
    : options_(std::move(options)), subject_(&subject), writer_(options_.task) {
  assert(options_.acknowledger != nullptr);
  writer_.on_written([this](checkpoint_id id) { options_.acknowledger->written(options_.task, id); });
}

io::error task_checkpoint::failure(std::string what) const {
  return io::error(std::make_error_code(std::errc::io_error), fmt::format("task {}: {}", options_.name, what));
}

runtime::task<io::result<void>> task_checkpoint::take(checkpoint_id id, checkpoint_mode mode, std::string dir) {
  runtime::log::debug("task {}: snapshot for checkpoint {} ({})", options_.name, id, to_string(mode));
  runtime::executor& home = *runtime::executor::current();
  const auto snapshot_started = home.now();
  taken_state ops = subject_->operator_states(id);
  const std::chrono::nanoseconds sync = home.now() - snapshot_started;
  // Not `cond ? co_await a : co_await b`: GCC 12 destroys that expression's result twice (the
  // simulation found the double free when a state write failed: --job wordcount --seeds 34).
  io::result<bool> started = false;
  if (mode == checkpoint_mode::unaligned) {
    started = co_await take_unaligned(id, std::move(dir), std::move(ops));
  } else {
    started = co_await take_aligned(id, mode, std::move(dir), std::move(ops));
  }
  if (!started) co_return std::move(started).error();
  if (started.value()) watchers_.spawn(watch(id, snapshot_started, sync, mode == checkpoint_mode::unaligned));
  co_return io::success();
}

// Aligned (and at-least-once): everything before the barrier is out; the barrier goes in-band.
// Aligned with a timeout into a partition: the barrier may have to overtake the output later, so it
// does not wait for the backlog either: the backlog is stored (as an unaligned checkpoint stores it)
// and goes out first after a recovery.
runtime::task<io::result<bool>> task_checkpoint::take_aligned(checkpoint_id id, checkpoint_mode mode, std::string dir,
                                                              taken_state ops) {
  std::optional<std::vector<std::byte>> backlog = subject_->output_backlog();
  const bool may_switch = mode == checkpoint_mode::aligned_timeout && options_.alignment_timeout.count() > 0 &&
                          options_.partition != nullptr && backlog.has_value();
  if (may_switch) {
    ops.now.push_back({section_index(state_section::output_backlog), std::move(*backlog)});
  } else if (subject_->output_backlogged()) {
    io::result<void> drained = co_await subject_->drain_output();
    if (!drained) co_return std::move(drained).error();
  }
  if (subject_->is_sink()) {
    io::result<std::vector<std::byte>> sink = co_await subject_->sink_state(id);
    if (!sink) co_return std::move(sink).error();
    ops.now.push_back({section_index(state_section::sink), std::move(sink).value()});
  }
  if (may_switch) {
    // The announcement overtakes the output with priority, so the consumers' alignment timeouts
    // count from now, however much data the barrier queues behind (barrier_handler.hpp).
    io::result<void> announced =
        co_await forward_event({bf::gate_event::type::barrier_announcement, id}, true, nullptr);
    if (!announced) co_return std::move(announced).error();
  }
  std::optional<bf::buffer_view> barrier;
  io::result<void> fwd = co_await forward_event({bf::gate_event::type::barrier, id}, false, nullptr,
                                                may_switch ? &barrier : nullptr);
  if (!fwd) co_return std::move(fwd).error();
  if (barrier && barrier_queued(*barrier)) {
    // The barrier waits behind backpressure: if it is still queued when the timeout passes, it
    // overtakes the data and this checkpoint stores that data as output channel state (the
    // consumer then takes the checkpoint unaligned).
    io::result<void> started = writer_.start(id, dir);
    if (!started) {
      runtime::log::info("task {}: checkpoint {}: {}", options_.name, id, started.error().message());
      co_return false;
    }
    add_taken_now(id, ops);
    (void)writer_.finish_input(id);  // the input was aligned: no input channel state
    watchers_.spawn(switch_after_timeout(id, std::move(*barrier), std::move(ops.later)));
    co_return true;
  }
  if (ops.later.empty()) {
    io::result<void> started = writer_.start_aligned(id, std::move(dir), std::move(ops.now));
    if (!started) runtime::log::info("task {}: checkpoint {}: {}", options_.name, id, started.error().message());
    co_return static_cast<bool>(started);
  }
  // Deferred parts follow: the file takes operator state after its start, no channel state.
  io::result<void> started = writer_.start(id, std::move(dir));
  if (!started) {
    runtime::log::info("task {}: checkpoint {}: {}", options_.name, id, started.error().message());
    co_return false;
  }
  (void)writer_.finish_input(id);
  add_operator_states(id, std::move(ops), std::nullopt);
  co_return true;
}

runtime::task<io::result<bool>> task_checkpoint::take_unaligned(checkpoint_id id, std::string dir, taken_state ops) {
  io::result<void> started = writer_.start(id, std::move(dir));
  if (!started) {
    runtime::log::info("task {}: checkpoint {}: {}", options_.name, id, started.error().message());
    co_return false;
  }
  std::vector<std::vector<bf::buffer_view>> overtaken;
  io::result<void> fwd = co_await forward_event({bf::gate_event::type::barrier, id}, true, &overtaken);
  if (!fwd) co_return std::move(fwd).error();
  for (std::size_t sub = 0; sub < overtaken.size(); ++sub) {
    if (!overtaken[sub].empty()) (void)writer_.add_output(id, 0, static_cast<std::uint32_t>(sub), std::move(overtaken[sub]));
  }
  // The input taken but not processed: in-flight data of its channel, ahead of what the handler
  // captures from the gate for that channel.
  for (checkpoint_subject::unconsumed_input& in : subject_->unconsumed()) {
    if (!in.partial.empty()) (void)writer_.add_input_bytes(id, 0, in.channel, std::move(in.partial));
    if (in.rest) {
      std::vector<bf::buffer_view> views;
      views.push_back(std::move(*in.rest));
      (void)writer_.add_input(id, 0, in.channel, std::move(views));
    }
  }
  // Records the chain produced that are not out yet (in the backlog, or written by the sink): they
  // come after the barrier, but belong before it; recovery sends or writes them first. So a slow
  // sink does not hold the checkpoint up. Taken now: what comes later is after the barrier.
  std::optional<std::vector<std::byte>> backlog = subject_->output_backlog();
  if (!options_.has_input) (void)writer_.finish_input(id);
  if (subject_->is_sink()) {
    // The sink's precommit runs while the task goes on taking the other channels' barriers (a
    // millisecond or more of flushes and fsyncs that used to come before the next barrier); the
    // sink writes nothing meanwhile. Its state completes the file's output side when it is in.
    subject_->hold_sink();
    watchers_.spawn(add_sink_state(id, std::move(ops), std::move(backlog)));
    co_return true;
  }
  add_operator_states(id, std::move(ops), std::move(backlog));
  co_return true;
}

// The bytes taken at once, and which deferred parts are deltas on what (known at the freeze).
void task_checkpoint::add_taken_now(checkpoint_id id, taken_state& ops) {
  for (operator_snapshot& op : ops.now) (void)writer_.add_operator_state(id, op.operator_index, std::move(op.bytes));
  for (const deferred_operator_state& part : ops.later) {
    const checkpoint_id base = part.state->delta_base();
    if (base != no_checkpoint) (void)writer_.add_operator_base(id, part.operator_index, base);
  }
}

void task_checkpoint::add_operator_states(checkpoint_id id, taken_state ops,
                                          std::optional<std::vector<std::byte>> backlog) {
  if (backlog) ops.now.push_back({section_index(state_section::output_backlog), std::move(*backlog)});
  add_taken_now(id, ops);
  if (ops.later.empty()) {
    (void)writer_.finish_output(id);
  } else {
    watchers_.spawn(write_deferred_then_finish(id, std::move(ops.later)));
  }
}

// A slice is about this many bytes: a few hundred microseconds of encoding at most.
static constexpr std::size_t deferred_slice_bytes = 64 * 1024;

runtime::task<bool> task_checkpoint::write_deferred(checkpoint_id id, std::vector<deferred_operator_state> later) {
  try {
    for (deferred_operator_state& part : later) {
      for (bool done = false; !done;) {
        std::vector<std::byte> slice;
        done = part.state->next_slice(slice, deferred_slice_bytes);
        if (!slice.empty()) {
          io::result<void> added = writer_.add_operator_state(id, part.operator_index, std::move(slice));
          if (!added) co_return false;  // aborted, subsumed or closed: the rest is not wanted
        }
        // To the next turn: yield() alone may resume in the same turn (the run queue is run until
        // empty), and the whole state was then encoded in one turn of 10 to 36 ms at 9 MiB a task,
        // its writes submitted only after it.
        if (!done) co_await runtime::yield_to_io();
      }
      // A later snapshot froze the state meanwhile: its checkpoint took over from this one. With
      // max_concurrent 1 that happens only after this one was aborted at the coordinator, but an
      // aligned snapshot awaits its output before its writer starts (and aborts this one): finished
      // in that gap, this checkpoint's file would end without the state's end.
      if (part.state->abandoned()) co_return false;
    }
  } catch (const std::exception& e) {
    fail_checkpoint(id, "the operators' state", e);
    co_return false;
  }
  co_return true;
}

void task_checkpoint::fail_checkpoint(checkpoint_id id, std::string_view part, const std::exception& e) {
  writer_.abort(id, abort_reason::io_error, e.what());
  subject_->fail_task(failure(fmt::format("checkpoint {}: {}: {}", id, part, e.what())));
}

void task_checkpoint::finish_deferred(checkpoint_id id) {
  try {
    (void)writer_.finish_output(id);
  } catch (const std::exception& e) {
    fail_checkpoint(id, "the operators' state", e);
  }
}

runtime::task<void> task_checkpoint::write_deferred_then_finish(checkpoint_id id,
                                                                std::vector<deferred_operator_state> later) {
  const bool written = co_await write_deferred(id, std::move(later));
  if (written) finish_deferred(id);
}

runtime::task<void> task_checkpoint::add_sink_state(checkpoint_id id, taken_state ops,
                                                    std::optional<std::vector<std::byte>> backlog) {
  try {
    io::result<std::vector<std::byte>> sink = co_await subject_->sink_state(id);
    if (!sink) {
      writer_.abort(id, abort_reason::io_error, sink.error().message());
      subject_->fail_task(std::move(sink).error());
      co_return;
    }
    ops.now.push_back({section_index(state_section::sink), std::move(sink).value()});
    add_operator_states(id, std::move(ops), std::move(backlog));
  } catch (const std::exception& e) {  // a precommit that throws: as one that fails (see watch)
    fail_checkpoint(id, "its sink's precommit", e);
  }
}

void task_checkpoint::capture(checkpoint_id id, std::uint32_t channel, std::vector<bf::buffer_view> views) {
  io::result<void> r = writer_.add_input(id, 0, channel, std::move(views));
  if (!r) runtime::log::debug("task {}: {}", options_.name, r.error().message());
}

void task_checkpoint::finish_input(checkpoint_id id) {
  io::result<void> r = writer_.finish_input(id);
  if (!r) runtime::log::debug("task {}: {}", options_.name, r.error().message());
}

void task_checkpoint::abort(checkpoint_id id, abort_reason reason, std::string_view detail) {
  writer_.abort(id, reason, std::string(detail));
}

runtime::task<io::result<void>> task_checkpoint::decline(checkpoint_id id, abort_reason reason, std::string detail) {
  writer_.abort(id, reason, detail);
  options_.acknowledger->decline(options_.task, id, reason, std::move(detail));
  co_return co_await forward_event({bf::gate_event::type::cancellation_marker, id}, true, nullptr);
}

runtime::task<io::result<void>> task_checkpoint::forward_event(bf::gate_event event, bool priority,
                                                               std::vector<std::vector<bf::buffer_view>>* overtaken,
                                                               std::optional<bf::buffer_view>* keep) {
  bf::result_partition* p = options_.partition;
  if (p == nullptr || p->finished()) co_return io::success();
  const bool control = event.kind == bf::gate_event::type::barrier || event.kind == bf::gate_event::type::cancellation_marker;
  bf::local_buffer_pool* pool = priority || control ? &p->priority_event_pool() : &p->pool();
  std::optional<bf::buffer_view> view = co_await bf::request_event_buffer(pool, event);
  if (!view) co_return failure("could not get a buffer for an event");
  if (keep != nullptr) *keep = view->share();
  for (std::size_t sub = 0; sub < p->subpartitions(); ++sub) {
    bf::buffer_view share = view->share();
    if (priority) {
      std::vector<bf::buffer_view> taken = p->add_priority_event(std::move(share), sub);
      if (overtaken != nullptr) overtaken->push_back(std::move(taken));
    } else {
      p->add_event(std::move(share), sub);
    }
  }
  co_return io::success();
}

bool task_checkpoint::barrier_queued(const bf::buffer_view& barrier) const {
  for (std::size_t sub = 0; sub < options_.partition->subpartitions(); ++sub) {
    if (options_.partition->event_queued(barrier, sub)) return true;
  }
  return false;
}

// An aligned-with-timeout barrier still queued in the output when the alignment timeout (counted
// from when this task sent it) passes becomes a priority event; the data it overtakes is output
// channel state of the checkpoint. Checked every millisecond until then. The deferred operator
// states are written meanwhile; the output side finishes once both are done.
runtime::task<void> task_checkpoint::switch_after_timeout(checkpoint_id id, bf::buffer_view barrier,
                                                          std::vector<deferred_operator_state> later) {
  auto [switched, written] = co_await runtime::when_all(switch_when_due(id, std::move(barrier)),
                                                        write_deferred(id, std::move(later)));
  if (switched && written) finish_deferred(id);  // not when the task is stopping
}

runtime::task<bool> task_checkpoint::switch_when_due(checkpoint_id id, bf::buffer_view barrier) {
  runtime::executor& home = *runtime::executor::current();
  const auto deadline = home.now() + options_.alignment_timeout;
  while (barrier_queued(barrier) && home.now() < deadline) {
    const bool slept = co_await runtime::sleep_for(std::chrono::milliseconds(1));
    if (!slept) co_return false;  // the task is stopping
  }
  bf::result_partition& p = *options_.partition;
  std::uint64_t switched = 0;
  for (std::size_t sub = 0; sub < p.subpartitions(); ++sub) {
    std::optional<std::vector<bf::buffer_view>> overtaken = p.promote_event(barrier, sub);
    if (!overtaken) continue;
    ++switched;
    output_switched_ = id;
    if (!overtaken->empty()) (void)writer_.add_output(id, 0, static_cast<std::uint32_t>(sub), std::move(*overtaken));
  }
  if (switched > 0) {
    runtime::log::debug("task {}: checkpoint {}: barrier overtook the output of {} channels after the alignment timeout",
                        options_.name, id, switched);
  }
  co_return true;
}

runtime::task<void> task_checkpoint::watch(checkpoint_id id, std::chrono::steady_clock::time_point snapshot_started,
                                           std::chrono::nanoseconds sync, bool unaligned) {
  // A watcher that throws fails the task now. Left to the scope, the exception waited for the close
  // (scope::join) and stopped the other watchers meanwhile: the next checkpoint was never
  // acknowledged and a task waiting for its final checkpoint waited for ever (the planted
  // FLINK-17869 lookup that throws, window seed 2).
  try {
    const checkpoint_outcome outcome = co_await writer_.result(id);
    report(id, outcome, snapshot_started, sync, unaligned);
  } catch (const std::exception& e) {
    fail_checkpoint(id, "its outcome", e);
  }
}

void task_checkpoint::report(checkpoint_id id, const checkpoint_outcome& outcome,
                             std::chrono::steady_clock::time_point snapshot_started, std::chrono::nanoseconds sync,
                             bool unaligned) {
  const auto took = runtime::executor::current()->now() - snapshot_started;
  runtime::log::debug("task {}: checkpoint {} state {} after {} us", options_.name, id,
                      outcome.completed() ? "durable" : "aborted",
                      std::chrono::duration_cast<std::chrono::microseconds>(took).count());
  if (outcome.completed()) {
    task_checkpoint_stats stats;
    stats.operator_state_bytes = outcome.operator_state_bytes;
    stats.channel_state_bytes = outcome.channel_state_bytes;
    stats.fsync_duration = outcome.fsync_duration;
    stats.write_duration = std::max(std::chrono::nanoseconds(0), std::chrono::nanoseconds(took) - outcome.fsync_duration);
    stats.snapshot_started_at = snapshot_started;
    stats.sync_duration = sync;
    stats.switched_to_unaligned = unaligned || output_switched_ == id;
    if (options_.alignment_of) stats.alignment_duration = options_.alignment_of(id);
    options_.acknowledger->acknowledge(options_.task, id, std::move(stats));
  } else if (outcome.reason != abort_reason::coordinator && outcome.reason != abort_reason::cancelled) {
    options_.acknowledger->decline(options_.task, id, outcome.reason, outcome.detail);
  }
}

runtime::task<void> task_checkpoint::close() {
  co_await writer_.close();
  co_await watchers_.join();
}

}  // namespace sluice::snapshot
