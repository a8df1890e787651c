#include "stream_task.hpp"

#include <sluice/buffers/event_codec.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/memory_limit.hpp>
#include <sluice/runtime/plant.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_any.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

namespace {

constexpr std::size_t source_batch_records = 512;
constexpr std::size_t input_batch_records = 1024;


// (Never a gate->next() inside when_any: a next() that took an item and lost the race drops it.)
rt::task<bool> wait_item(bf::input_gate* gate) { co_return co_await gate->wait_item(); }
rt::task<bool> wait_event(rt::event* e) { co_return co_await e->wait(); }
rt::task<bool> wait_writable(bf::result_partition* p) { co_return co_await p->wait_writable(); }
rt::task<bool> wait_priority(bf::input_gate* g) { co_return co_await g->wait_priority(); }
rt::task<bool> wait_output(output_tail* out) {
  co_await out->wait_ready();
  co_return true;
}
rt::task<bool> sleep_until(std::chrono::steady_clock::time_point t) { co_return co_await rt::sleep_until(t); }
rt::task<bool> wait_readable(source_head* s) {
  co_await s->wait_readable();
  co_return true;
}

}  // namespace

namespace {
ss::task_checkpoint_options checkpoint_options(const task_wiring& w,
                                               std::function<std::chrono::nanoseconds(ss::checkpoint_id)> alignment_of) {
  ss::task_checkpoint_options o;
  o.task = w.id;
  o.name = w.name;
  o.acknowledger = w.coordinator;
  o.partition = w.partition;
  o.has_input = w.gate != nullptr;
  o.alignment_timeout = w.alignment_timeout;
  o.alignment_of = std::move(alignment_of);
  return o;
}
}  // namespace

stream_task::stream_task(task_wiring wiring, task_builder built)
    : wiring_(std::move(wiring)), built_(std::move(built)), checkpoint_(checkpoint_options(wiring_,
                                     [this](ss::checkpoint_id id) {
                                       if (handler_ && handler_->last_stats() && handler_->last_stats()->id == id) {
                                         return std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             handler_->last_stats()->alignment_duration());
                                       }
                                       return std::chrono::nanoseconds(0);
                                     }),
                  *this) {
  if (wiring_.gate != nullptr) {
    handler_.emplace(*wiring_.gate, ss::handler_options{wiring_.mode, wiring_.alignment_timeout});
    const std::size_t n = wiring_.gate->channels();
    deserializers_.reserve(n);
    for (std::size_t c = 0; c < n; ++c) deserializers_.emplace_back(wiring_.max_record_bytes);
    watermarks_.assign(n, std::nullopt);
    data_ended_.assign(n, false);
  }
}

stream_task::~stream_task() = default;

io::error stream_task::failure(std::string what) const {
  return io::error(std::make_error_code(std::errc::io_error), fmt::format("task {}: {}", wiring_.name, what));
}

// --- messages (posted to the task's executor) -----------------------------------------------------

void stream_task::post_message(message m) {
  mailbox_.push_back(std::move(m));
  wake_.set();
}
void stream_task::trigger_checkpoint(ss::checkpoint_id id, ss::checkpoint_mode mode, const ss::trigger_options&) {
  post_message(trigger_msg{id, mode});
}
void stream_task::notify_checkpoint_complete(ss::checkpoint_id id) { post_message(complete_msg{id}); }
void stream_task::notify_checkpoint_aborted(ss::checkpoint_id id, ss::abort_reason reason, std::string_view detail) {
  post_message(abort_msg{id, reason, std::string(detail)});
}
void stream_task::finish_input() { post_message(finish_msg{}); }
void stream_task::pause_input() { post_message(pause_msg{}); }

// --- the loop ----------------------------------------------------------------------------------------

rt::task<void> stream_task::run() {
  std::optional<std::string> failed;
  const std::stop_token stop = co_await rt::current_stop_token();
  try {
    phase_ = phase::restoring;
    io::result<void> ok = co_await restore();
    phase_ = phase::running;
    auto next_yield = wiring_.executor->now();
    while (ok) {
      if (stop.stop_requested()) {  // the job is ending (another task failed, or a signal)
        ok = failure("stopped");
        break;
      }
      if (deferred_failure_) {  // a sink's precommit, run beside the loop, failed
        ok = std::move(*deferred_failure_);
        break;
      }
      // A task that never waits would keep the I/O of its executor (state writes, the coordinator's
      // commits) from being submitted: let one loop turn through every yield_interval.
      if (const auto now = wiring_.executor->now(); now >= next_yield) {
        next_yield = now + std::chrono::microseconds(200);
        co_await rt::yield_to_io();
      }
      ok = co_await handle_mailbox();
      if (!ok) break;
      if (built_.output_->backlogged()) {
        ok = co_await step_output();
        continue;
      }
      if (chain_ending()) {  // (before the source's or the gate's end: the chain still emits)
        ok = co_await step_end();
        continue;
      }
      if (!data_end_reported_ && (built_.source_ != nullptr ? source_ended_ : input_data_ended_)) {
        data_end_reported_ = true;
        task_listener* listener = wiring_.listener;
        ss::task_id id = wiring_.id;
        wiring_.runner->post([listener, id] { listener->data_ended(id); });
      }
      if (built_.source_ != nullptr) {
        if (finish_requested_) break;
        ok = co_await step_source();
        continue;
      }
      if (wiring_.gate->finished() && !(current_channel_ && !deserializers_[*current_channel_].needs_buffer())) break;
      ok = co_await step_input();
    }
    phase_ = phase::ending;
    if (ok) ok = co_await handle_mailbox();  // a commit that came with the end
    if (ok && built_.output_->backlogged()) ok = co_await built_.output_->drain();
    if (ok && wiring_.partition != nullptr && !wiring_.partition->finished()) {
      const bool finished = co_await wiring_.partition->finish();
      if (!finished) ok = failure("could not end its output partition");
    }
    // A follower's task: the leader's final checkpoint's completion (the sink publishes), then the
    // order to finish, in that order (task_wiring::await_finish).
    while (ok && wiring_.await_finish && !finish_requested_) {
      phase_ = phase::awaiting_finish;
      if (deferred_failure_) {
        ok = std::move(*deferred_failure_);
        break;
      }
      if (mailbox_.empty()) {
        meters_.idle.begin(wiring_.executor->now());
        const bool woke = co_await wake_.wait();
        meters_.idle.end(wiring_.executor->now());
        if (!woke) {
          ok = failure("stopped");
          break;
        }
      }
      ok = co_await handle_mailbox();
    }
    if (!ok) {
      // Every failure names the task (an I/O error of a source or sink names only its file).
      const std::string what = ok.error().message();
      failed = what.rfind("task " + wiring_.name + ":", 0) == 0 ? what : fmt::format("task {}: {}", wiring_.name, what);
    }
  } catch (const std::length_error& e) {
    failed = fmt::format("task {}: {} (the job's maximum record size: job_settings::max_record_bytes, "
                         "--max-record-bytes)", wiring_.name, e.what());
  } catch (const std::bad_alloc& e) {
    failed = fmt::format("task {}: out of memory ({}){}", wiring_.name, e.what(), rt::address_space_note());
  } catch (const std::exception& e) {
    failed = fmt::format("task {}: {}", wiring_.name, e.what());
  }
  if (failed && stop.stop_requested()) failed.reset();  // stopped by the job, not failed
  phase_ = phase::closing;
  // Nothing escapes past the task's report: a close that throws (a checkpoint's watcher, out of
  // memory) fails the task, and the job ends through its teardown. An exception let out here was
  // rethrown from the runner's join past that teardown, and the engine's shutdown then resumed the
  // transports' loops on freed memory (a spin or a SIGSEGV: docs/simulation.md, "Budgets").
  if (built_.source_ != nullptr) {
    try {
      co_await built_.source_->close();
    } catch (...) {
      note_close_failure(failed, "its source", std::current_exception());
    }
  }
  try {
    co_await built_.output_->close();
  } catch (...) {
    note_close_failure(failed, "its output", std::current_exception());
  }
  try {
    co_await checkpoint_.close();
  } catch (...) {
    note_close_failure(failed, "its checkpoints", std::current_exception());
  }
  // A sink's precommit that ran beside the loop and failed after it ended (the close waits for it).
  if (!failed && deferred_failure_ && !stop.stop_requested()) {
    failed = fmt::format("task {}: {}", wiring_.name, deferred_failure_->message());
  }
  phase_ = phase::ended;
  meters_.idle.begin(wiring_.executor->now());  // until destroyed: an ended task does nothing
  ss::task_id id = wiring_.id;
  task_listener* listener = wiring_.listener;
  wiring_.runner->post([listener, id, failed] { listener->task_ended(id, failed); });
}

void stream_task::note_close_failure(std::optional<std::string>& failed, const char* part,
                                     std::exception_ptr thrown) const {
  std::string what = "an exception that is not a std::exception";
  try {
    std::rethrow_exception(thrown);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  runtime::log::error("task {}: closing {} threw: {}", wiring_.name, part, what);
  if (!failed) failed = fmt::format("task {}: closing {}: {}", wiring_.name, part, what);
}

rt::task<io::result<void>> stream_task::handle_mailbox() {
  while (!mailbox_.empty()) {
    message m = std::move(mailbox_.front());
    mailbox_.pop_front();
    if (auto* t = std::get_if<trigger_msg>(&m)) {
      io::result<void> r = co_await snapshot(t->id, t->mode);  // (it drains the output where it must)
      if (!r) co_return r;
    } else if (auto* c = std::get_if<complete_msg>(&m)) {
      for (stateful* s : built_.states_) s->checkpoint_completed(c->id);  // the next deltas' base
      io::result<void> r = co_await built_.output_->commit(c->id);
      if (!r) co_return r;
      task_listener* listener = wiring_.listener;
      const ss::task_id task = wiring_.id;
      const ss::checkpoint_id id = c->id;
      wiring_.runner->post([listener, task, id] { listener->committed(task, id); });
    } else if (auto* a = std::get_if<abort_msg>(&m)) {
      checkpoint_.abort(a->id, a->reason, a->detail);
      if (handler_) {
        io::result<void> r = co_await perform(handler_->abort(a->id, a->reason, a->detail));
        if (!r) co_return r;
      }
    } else if (std::holds_alternative<pause_msg>(m)) {
      input_paused_ = true;
    } else {
      finish_requested_ = true;
    }
  }
  wake_.reset();
  co_return io::result<void>();
}

rt::task<io::result<void>> stream_task::step_source() {
  if (source_ended_ || input_paused_) {
    // Wait for a trigger (the final checkpoint) or the order to finish (or, paused, to stop).
    meters_.idle.begin(wiring_.executor->now());
    const bool woke = co_await wake_.wait();
    meters_.idle.end(wiring_.executor->now());
    if (!woke) co_return failure("stopped");
    co_return io::result<void>();
  }
  if (wiring_.partition != nullptr && !wiring_.partition->writable()) {
    meters_.backpressure.begin(wiring_.executor->now());
    auto r = co_await rt::when_any(wait_writable(wiring_.partition), wait_event(&wake_));
    meters_.backpressure.end(wiring_.executor->now());
    (void)r;
    co_return io::result<void>();
  }
  io::result<source_status> status = co_await built_.source_->produce(source_batch_records);
  if (!status) co_return std::move(status).error();
  if (status.value() == source_status::end) source_ended_ = true;
  if (status.value() == source_status::idle) {
    // A quiet source (a message system with nothing new): wait for it, a barrier or a message.
    meters_.idle.begin(wiring_.executor->now());
    auto r = co_await rt::when_any(wait_readable(built_.source_), wait_event(&wake_));
    meters_.idle.end(wiring_.executor->now());
    (void)r;
  }
  co_return io::result<void>();
}

// Output first: push out what goes now; when the output is full, wait for it, a priority event (an
// unaligned barrier overtakes the backpressure) or a control message.
rt::task<io::result<void>> stream_task::step_output() {
  output_tail& out = *built_.output_;
  if (out.ready()) co_return co_await out.drain_ready();
  bf::input_gate* gate = wiring_.gate;
  if (gate != nullptr && gate->has_priority()) {
    std::optional<bf::gate_item> item = gate->try_next();
    if (item) co_return co_await handle_item(std::move(*item));
    co_return io::result<void>();
  }
  // An alignment in progress still times out while the output is full (aligned-timeout).
  const std::optional<std::chrono::steady_clock::time_point> deadline = handler_ ? handler_->deadline() : std::nullopt;
  // (A partition tail waits for a free buffer here: backpressure; a sink waits for its own I/O.)
  if (wiring_.partition != nullptr) meters_.backpressure.begin(wiring_.executor->now());
  if (gate != nullptr && deadline) {
    auto r = co_await rt::when_any(wait_output(&out), wait_priority(gate), wait_event(&wake_), sleep_until(*deadline));
    meters_.backpressure.end(wiring_.executor->now());
    if (r.index == 3) co_return co_await perform(handler_->on_timer());
  } else if (gate != nullptr) {
    auto r = co_await rt::when_any(wait_output(&out), wait_priority(gate), wait_event(&wake_));
    (void)r;
  } else {
    auto r = co_await rt::when_any(wait_output(&out), wait_event(&wake_));
    (void)r;
  }
  meters_.backpressure.end(wiring_.executor->now());
  co_return io::result<void>();
}

bool stream_task::chain_ending() const noexcept {
  return std::any_of(built_.enders_.begin(), built_.enders_.end(), [](const stepped_end* e) { return e->ending(); });
}

rt::task<io::result<void>> stream_task::step_end() {
  // What comes after the end of the data is events (barriers, the partitions' ends): one that is
  // there goes first, so a barrier waits for at most one step.
  bf::input_gate* gate = wiring_.gate;
  const std::optional<std::chrono::steady_clock::time_point> deadline = handler_ ? handler_->deadline() : std::nullopt;
  if (deadline && wiring_.executor->now() >= *deadline) co_return co_await perform(handler_->on_timer());
  if (gate != nullptr) {
    std::optional<bf::gate_item> item = gate->try_next();
    if (item) co_return co_await handle_item(std::move(*item));
  }
  auto stepped = in_chain([this] {
    for (stepped_end* e : built_.enders_) {
      if (e->ending()) {
        e->continue_end();
        return;
      }
    }
  });
  co_await std::move(stepped);
  co_return io::result<void>();
}

rt::task<io::result<void>> stream_task::step_input() {
  bf::input_gate& gate = *wiring_.gate;
  // An aligned-with-timeout alignment switches when its time is up, also while the task works
  // through a long run of buffered records (a slow operator) and takes no item.
  const std::optional<std::chrono::steady_clock::time_point> deadline = handler_->deadline();
  if (deadline && wiring_.executor->now() >= *deadline) co_return co_await perform(handler_->on_timer());
  // Switched: the handler promotes a barrier that reached the gate behind data since (no actions).
  if (wiring_.mode == ss::checkpoint_mode::aligned_timeout && handler_->capturing()) (void)handler_->on_timer();
  const bool reading = current_channel_ && !deserializers_[*current_channel_].needs_buffer();
  if (reading && !gate.has_priority()) {
    if (wiring_.partition != nullptr && !wiring_.partition->writable()) {
      // Output full: wait for a buffer, a priority event, a message or the alignment's deadline;
      // never block the executor.
      meters_.backpressure.begin(wiring_.executor->now());
      if (deadline) {
        auto r = co_await rt::when_any(wait_writable(wiring_.partition), wait_priority(&gate), wait_event(&wake_),
                                       sleep_until(*deadline));
        (void)r;  // (the next step sees the deadline)
      } else {
        auto r = co_await rt::when_any(wait_writable(wiring_.partition), wait_priority(&gate), wait_event(&wake_));
        (void)r;
      }
      meters_.backpressure.end(wiring_.executor->now());
      co_return io::result<void>();
    }
    auto processed = in_chain([this] { process_records(); });
    co_await std::move(processed);
    co_return io::result<void>();
  }
  std::optional<bf::gate_item> item = gate.try_next();
  if (!item && reading) {  // (a priority event was announced but is gone: keep reading)
    auto processed = in_chain([this] { process_records(); });
    co_await std::move(processed);
    co_return io::result<void>();
  }
  if (!item) co_return co_await wait_for_work();
  co_return co_await handle_item(std::move(*item));
}

rt::task<io::result<void>> stream_task::wait_for_work() {
  bf::input_gate& gate = *wiring_.gate;
  if (gate.finished()) co_return io::result<void>();
  std::optional<std::chrono::steady_clock::time_point> deadline = handler_->deadline();
  // Idle: nothing to read (the task's input is what it waits for).
  meters_.idle.begin(wiring_.executor->now());
  if (deadline) {
    auto r = co_await rt::when_any(wait_item(&gate), wait_event(&wake_), sleep_until(*deadline));
    meters_.idle.end(wiring_.executor->now());
    if (r.index == 2) co_return co_await perform(handler_->on_timer());
    co_return io::result<void>();  // the loop takes the item, or reads the mailbox
  }
  auto r = co_await rt::when_any(wait_item(&gate), wait_event(&wake_));
  meters_.idle.end(wiring_.executor->now());
  (void)r;
  co_return io::result<void>();
}

void stream_task::process_records() {
  bf::record_deserializer& des = deserializers_[*current_channel_];
  for (std::size_t i = 0; i < input_batch_records; ++i) {
    std::optional<std::span<const std::byte>> bytes = des.next_record_bytes();
    if (!bytes) break;
    built_.input_->record(*current_channel_, *bytes);
    ++records_in_;
    if (built_.output_->backlogged()) break;
  }
}

rt::task<io::result<void>> stream_task::handle_item(bf::gate_item item) {
  if (item.is_failure()) {
    co_return failure(fmt::format("input channel {} failed: {}", item.channel, wiring_.gate->failure(item.channel)));
  }
  ss::barrier_actions actions = handler_->on_item(item);
  io::result<void> done = co_await perform(std::move(actions));
  if (!done) co_return done;
  if (!item.is_event()) {
    if (item.data.size() == 0) co_return done;
    meters_.bytes_in += item.data.size();
    current_channel_ = item.channel;
    deserializers_[item.channel].set_next_buffer(item.data.get().retain());
    item.data.release();  // view-held until the deserializer is done with it
    auto processed = in_chain([this] { process_records(); });
    co_await std::move(processed);
    co_return done;
  }
  const std::uint32_t channel = item.channel;
  const bf::gate_event* event = &*item.event;
  auto handled = in_chain([this, channel, event] { on_event(channel, *event); }, true);
  co_await std::move(handled);
  co_return done;
}

void stream_task::on_event(std::uint32_t channel, const bf::gate_event& event) {
  using type = bf::gate_event::type;
  if (event.kind == type::watermark) {
    watermarks_[channel] = std::max(watermarks_[channel].value_or(0), event.id);
  } else if (event.kind == type::end_of_data) {
    data_ended_[channel] = true;
  } else if (event.kind != type::end_of_partition) {
    return;
  }
  if (event.kind == type::end_of_partition) data_ended_[channel] = true;
  // The task's watermark is the smallest of its channels that still carry data; none while one of
  // them has not sent any.
  std::optional<std::uint64_t> low;
  bool all_ended = true;
  bool all_known = true;
  for (std::size_t c = 0; c < watermarks_.size(); ++c) {
    if (data_ended_[c]) continue;
    all_ended = false;
    if (!watermarks_[c]) {
      all_known = false;
      continue;
    }
    low = low ? std::min(*low, *watermarks_[c]) : *watermarks_[c];
  }
  if (!all_known) low.reset();
  if (low && (!watermark_sent_ || *low > watermark_out_)) {
    watermark_out_ = *low;
    watermark_sent_ = true;
    built_.input_->watermark(*low);
  }
  if (all_ended && !input_data_ended_) {
    input_data_ended_ = true;
    built_.input_->end_of_data();
  }
}

}  // namespace sluice::dataflow::detail
