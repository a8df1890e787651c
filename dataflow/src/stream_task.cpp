#include "stream_task.hpp"

#include <sluice/buffers/event_codec.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_any.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

namespace {

constexpr std::size_t source_batch_records = 512;
constexpr std::size_t input_batch_records = 1024;

// The records of recovered channel state: whole length-prefixed records, one after another.
template <class F>
void for_each_record(std::span<const std::byte> bytes, F&& f) {
  std::size_t at = 0;
  while (at + bf::record_length_bytes <= bytes.size()) {
    std::uint32_t n;
    std::memcpy(&n, bytes.data() + at, sizeof n);
    at += bf::record_length_bytes;
    if (at + n > bytes.size()) throw std::runtime_error("recovered channel state ends inside a record");
    f(bytes.subspan(at, n));
    at += n;
  }
  if (at != bytes.size()) throw std::runtime_error("recovered channel state ends inside a record length");
}

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

}  // namespace

stream_task::stream_task(task_wiring wiring, task_builder built)
    : wiring_(std::move(wiring)), built_(std::move(built)), writer_(wiring_.id) {
  if (wiring_.gate != nullptr) {
    handler_.emplace(*wiring_.gate, ss::handler_options{wiring_.mode, wiring_.alignment_timeout});
    const std::size_t n = wiring_.gate->channels();
    deserializers_.resize(n);
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

// --- the loop ----------------------------------------------------------------------------------------

rt::task<void> stream_task::run() {
  std::optional<std::string> failed;
  const std::stop_token stop = co_await rt::current_stop_token();
  try {
    io::result<void> ok = co_await restore();
    auto next_yield = wiring_.executor->now();
    while (ok) {
      if (stop.stop_requested()) {  // the job is ending (another task failed, or a signal)
        ok = failure("stopped");
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
    if (ok) ok = co_await handle_mailbox();  // a commit that came with the end
    if (ok && built_.output_->backlogged()) ok = co_await built_.output_->drain();
    if (ok && wiring_.partition != nullptr && !wiring_.partition->finished()) {
      const bool finished = co_await wiring_.partition->finish();
      if (!finished) ok = failure("could not end its output partition");
    }
    if (!ok) failed = ok.error().message();
  } catch (const std::exception& e) {
    failed = fmt::format("task {}: {}", wiring_.name, e.what());
  }
  if (failed && stop.stop_requested()) failed.reset();  // stopped by the job, not failed
  co_await built_.output_->close();
  co_await writer_.close();
  co_await watchers_.join();
  ss::task_id id = wiring_.id;
  task_listener* listener = wiring_.listener;
  wiring_.runner->post([listener, id, failed] { listener->task_ended(id, failed); });
}

rt::task<io::result<void>> stream_task::restore() {
  io::result<void> recovered = io::result<void>();
  const ss::task_state* state = wiring_.recovered;
  std::vector<std::byte> sink_state;
  if (state != nullptr) {
    const auto& ops = state->operator_state;
    for (std::uint32_t i = 0; i < built_.states_.size(); ++i) {
      if (auto it = ops.find(i); it != ops.end()) built_.states_[i]->restore_state(it->second);
    }
    if (built_.source_ != nullptr) {
      if (auto it = ops.find(source_index); it != ops.end()) built_.source_->restore_state(it->second);
    }
    if (auto it = ops.find(sink_index); it != ops.end()) sink_state = it->second;
  }
  if (built_.output_->is_sink()) {
    recovered = co_await built_.output_->recover(sink_state);
    if (!recovered) co_return recovered;
  }
  if (built_.source_ != nullptr) {
    recovered = co_await built_.source_->open();
    if (!recovered) co_return recovered;
  }
  if (state == nullptr) co_return recovered;

  // Output first: what the barrier overtook, then what the tail had queued, before anything new.
  if (wiring_.partition != nullptr) {
    for (const auto& [key, bytes] : state->output_channels) {
      const std::size_t sub = key.index;
      std::vector<std::vector<std::byte>> records;
      for_each_record(bytes, [&](std::span<const std::byte> r) { records.emplace_back(r.begin(), r.end()); });
      for (const auto& r : records) {
        const bool ok = co_await wiring_.partition->emit_bytes(r, sub);
        if (!ok) co_return failure("could not re-send recovered output");
      }
    }
  }
  // The tail's queue at the checkpoint goes out next (the loop drains output before taking input).
  if (auto it = state->operator_state.find(backlog_index); it != state->operator_state.end()) {
    auto* tail = dynamic_cast<backlog_source*>(built_.output_);
    if (tail == nullptr) co_return failure("the checkpoint holds an output backlog, but this task's output keeps none");
    tail->restore_backlog(it->second);
  }
  // Then recovered input, before any new input (invariant 8); a barrier meanwhile is "not ready".
  if (built_.input_ != nullptr && !state->input_channels.empty()) {
    (void)handler_->set_replaying(true);
    for (const auto& [key, bytes] : state->input_channels) {
      const std::uint32_t channel = key.index;
      const std::vector<std::byte>* state_bytes = &bytes;
      auto replayed = in_chain([this, channel, state_bytes] {
        for_each_record(*state_bytes, [&](std::span<const std::byte> r) {
          built_.input_->record(channel, r);
          ++records_in_;
        });
      });
      co_await std::move(replayed);
      if (built_.output_->backlogged()) {
        io::result<void> drained = co_await built_.output_->drain();
        if (!drained) co_return drained;
      }
    }
    (void)handler_->set_replaying(false);
    runtime::log::info("task {}: replayed recovered input channel state", wiring_.name);
  }
  co_return io::result<void>();
}

rt::task<io::result<void>> stream_task::handle_mailbox() {
  while (!mailbox_.empty()) {
    message m = std::move(mailbox_.front());
    mailbox_.pop_front();
    if (auto* t = std::get_if<trigger_msg>(&m)) {
      io::result<void> r = co_await snapshot(t->id, t->mode);  // (it drains the output where it must)
      if (!r) co_return r;
    } else if (auto* c = std::get_if<complete_msg>(&m)) {
      io::result<void> r = co_await built_.output_->commit(c->id);
      if (!r) co_return r;
    } else if (auto* a = std::get_if<abort_msg>(&m)) {
      writer_.abort(a->id, a->reason, a->detail);
      if (handler_) {
        io::result<void> r = co_await perform(handler_->abort(a->id, a->reason, a->detail));
        if (!r) co_return r;
      }
    } else {
      finish_requested_ = true;
    }
  }
  wake_.reset();
  co_return io::result<void>();
}

rt::task<io::result<void>> stream_task::step_source() {
  if (source_ended_) {
    // Wait for a trigger (the final checkpoint) or the order to finish.
    const bool woke = co_await wake_.wait();
    if (!woke) co_return failure("stopped");
    co_return io::result<void>();
  }
  if (wiring_.partition != nullptr && !wiring_.partition->writable()) {
    auto r = co_await rt::when_any(wait_writable(wiring_.partition), wait_event(&wake_));
    (void)r;
    co_return io::result<void>();
  }
  io::result<source_status> status = co_await built_.source_->produce(source_batch_records);
  if (!status) co_return std::move(status).error();
  if (status.value() == source_status::end) source_ended_ = true;
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
  if (gate != nullptr && deadline) {
    auto r = co_await rt::when_any(wait_output(&out), wait_priority(gate), wait_event(&wake_), sleep_until(*deadline));
    if (r.index == 3) co_return co_await perform(handler_->on_timer());
  } else if (gate != nullptr) {
    auto r = co_await rt::when_any(wait_output(&out), wait_priority(gate), wait_event(&wake_));
    (void)r;
  } else {
    auto r = co_await rt::when_any(wait_output(&out), wait_event(&wake_));
    (void)r;
  }
  co_return io::result<void>();
}

rt::task<io::result<void>> stream_task::step_input() {
  bf::input_gate& gate = *wiring_.gate;
  const bool reading = current_channel_ && !deserializers_[*current_channel_].needs_buffer();
  if (reading && !gate.has_priority()) {
    if (wiring_.partition != nullptr && !wiring_.partition->writable()) {
      // Output full: wait for a buffer, a priority event or a message; never block the executor.
      auto r = co_await rt::when_any(wait_writable(wiring_.partition), wait_priority(&gate), wait_event(&wake_));
      (void)r;
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
  if (deadline) {
    auto r = co_await rt::when_any(wait_item(&gate), wait_event(&wake_), sleep_until(*deadline));
    if (r.index == 2) co_return co_await perform(handler_->on_timer());
    co_return io::result<void>();  // the loop takes the item, or reads the mailbox
  }
  auto r = co_await rt::when_any(wait_item(&gate), wait_event(&wake_));
  (void)r;
  co_return io::result<void>();
}

// A call into the chain: on a fiber when the stage has blocking operators (they may await there).
template <class F>
rt::task<void> stream_task::in_chain(F fn) {
  if (!built_.on_fiber_) {
    fn();
    co_return;
  }
  rt::task<void> on_fiber = rt::run_fiber(std::move(fn));
  co_await std::move(on_fiber);
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
    current_channel_ = item.channel;
    deserializers_[item.channel].set_next_buffer(item.data.get().retain());
    item.data.release();  // view-held until the deserializer is done with it
    auto processed = in_chain([this] { process_records(); });
    co_await std::move(processed);
    co_return done;
  }
  const std::uint32_t channel = item.channel;
  const bf::gate_event* event = &*item.event;
  auto handled = in_chain([this, channel, event] { on_event(channel, *event); });
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

// --- checkpoints ---------------------------------------------------------------------------------------

rt::task<io::result<void>> stream_task::perform(ss::barrier_actions actions) {
  for (ss::barrier_action& action : actions) {
    if (auto* t = std::get_if<ss::trigger_snapshot>(&action)) {
      io::result<void> r = co_await snapshot(t->id, t->mode);
      if (!r) co_return r;
    } else if (auto* c = std::get_if<ss::capture_input>(&action)) {
      io::result<void> r = writer_.add_input(c->id, static_cast<std::uint16_t>(c->gate), c->channel, std::move(c->views));
      if (!r) runtime::log::debug("task {}: {}", wiring_.name, r.error().message());
    } else if (auto* f = std::get_if<ss::finish_input>(&action)) {
      io::result<void> r = writer_.finish_input(f->id);
      if (!r) runtime::log::debug("task {}: {}", wiring_.name, r.error().message());
    } else if (auto* a = std::get_if<ss::abort_checkpoint>(&action)) {
      writer_.abort(a->id, a->reason, a->detail);
      wiring_.coordinator->decline(wiring_.id, a->id, a->reason, a->detail);
      io::result<void> r = co_await forward_event({bf::gate_event::type::cancellation_marker, a->id}, true, nullptr);
      if (!r) co_return r;
    }
  }
  co_return io::result<void>();
}

rt::task<io::result<void>> stream_task::forward_event(bf::gate_event event, bool priority,
                                                      std::vector<std::vector<bf::buffer_view>>* overtaken,
                                                      std::optional<bf::buffer_view>* keep) {
  bf::result_partition* p = wiring_.partition;
  if (p == nullptr || p->finished()) co_return io::result<void>();
  // Barriers and cancellation markers never wait for a data buffer of a backpressured partition.
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
  co_return io::result<void>();
}

rt::task<io::result<void>> stream_task::snapshot(ss::checkpoint_id id, ss::checkpoint_mode mode) {
  runtime::log::debug("task {}: snapshot for checkpoint {} ({})", wiring_.name, id, ss::to_string(mode));
  const std::string dir = wiring_.storage->checkpoint_dir(id);
  const bool unaligned = mode == ss::checkpoint_mode::unaligned;
  // Operator state, in chain order, then the source's position.
  std::vector<ss::operator_snapshot> ops;
  for (std::uint32_t i = 0; i < built_.states_.size(); ++i) ops.push_back({i, built_.states_[i]->snapshot_state()});
  if (built_.source_ != nullptr) ops.push_back({source_index, built_.source_->snapshot_state()});

  if (!unaligned) {
    // Aligned (and at-least-once): everything before the barrier is out; the barrier goes in-band.
    // Aligned with a timeout into a partition: the barrier may have to overtake the output later,
    // so it does not wait for the tail's queue either: the queued records are stored (as an
    // unaligned checkpoint stores them) and go out first after a recovery.
    auto* backlog = dynamic_cast<backlog_source*>(built_.output_);
    const bool may_switch = mode == ss::checkpoint_mode::aligned_timeout && wiring_.alignment_timeout.count() > 0 &&
                            wiring_.partition != nullptr && backlog != nullptr;
    if (may_switch) {
      ops.push_back({backlog_index, backlog->backlog_state()});
    } else if (built_.output_->backlogged()) {
      io::result<void> drained = co_await built_.output_->drain();
      if (!drained) co_return drained;
    }
    if (built_.output_->is_sink()) {
      io::result<std::vector<std::byte>> sink = co_await built_.output_->snapshot(id);
      if (!sink) co_return std::move(sink).error();
      ops.push_back({sink_index, std::move(sink).value()});
    }
    std::optional<bf::buffer_view> barrier;
    io::result<void> fwd = co_await forward_event({bf::gate_event::type::barrier, id}, false, nullptr,
                                                  may_switch ? &barrier : nullptr);
    if (!fwd) co_return fwd;
    if (barrier && barrier_queued(*barrier)) {
      // Aligned with a timeout, and the barrier waits behind backpressure: if it is still queued
      // when the timeout passes, it overtakes the data and this checkpoint stores that data as
      // output channel state (the consumer then takes the checkpoint unaligned).
      io::result<void> started = writer_.start(id, dir);
      if (!started) {
        runtime::log::info("task {}: checkpoint {}: {}", wiring_.name, id, started.error().message());
        co_return io::result<void>();
      }
      for (ss::operator_snapshot& op : ops) (void)writer_.add_operator_state(id, op.operator_index, std::move(op.bytes));
      (void)writer_.finish_input(id);  // the input was aligned: no input channel state
      watchers_.spawn(switch_after_timeout(id, std::move(*barrier)));
    } else {
      io::result<void> started = writer_.start_aligned(id, dir, std::move(ops));
      if (!started) {
        runtime::log::info("task {}: checkpoint {}: {}", wiring_.name, id, started.error().message());
        co_return io::result<void>();
      }
    }
  } else {
    io::result<void> started = writer_.start(id, dir);
    if (!started) {
      runtime::log::info("task {}: checkpoint {}: {}", wiring_.name, id, started.error().message());
      co_return io::result<void>();
    }
    std::vector<std::vector<bf::buffer_view>> overtaken;
    io::result<void> fwd = co_await forward_event({bf::gate_event::type::barrier, id}, true, &overtaken);
    if (!fwd) co_return fwd;
    for (std::size_t sub = 0; sub < overtaken.size(); ++sub) {
      if (!overtaken[sub].empty()) (void)writer_.add_output(id, 0, static_cast<std::uint32_t>(sub), std::move(overtaken[sub]));
    }
    // The unread rest of the buffer being processed is in-flight input.
    if (current_channel_) {
      bf::record_deserializer::unconsumed_part rest = deserializers_[*current_channel_].unconsumed();
      if (rest.spanning) {
        writer_.abort(id, ss::abort_reason::declined, "a record spanning buffers was half read at the barrier");
        wiring_.coordinator->decline(wiring_.id, id, ss::abort_reason::declined,
                                     "a record spanning buffers was half read at the barrier");
        co_return io::result<void>();
      }
      if (rest.rest) {
        std::vector<bf::buffer_view> views;
        views.push_back(std::move(*rest.rest));
        (void)writer_.add_input(id, 0, *current_channel_, std::move(views));
      }
    }
    // Records the chain produced that are not out yet (in the partition, or written by the sink):
    // they come after the barrier, but belong before it; recovery sends or writes them first. So a
    // slow sink does not hold the checkpoint up.
    if (built_.output_->is_sink()) {
      io::result<std::vector<std::byte>> sink = co_await built_.output_->snapshot(id);
      if (!sink) co_return std::move(sink).error();
      ops.push_back({sink_index, std::move(sink).value()});
    }
    if (auto* tail = dynamic_cast<backlog_source*>(built_.output_)) ops.push_back({backlog_index, tail->backlog_state()});
    for (ss::operator_snapshot& op : ops) (void)writer_.add_operator_state(id, op.operator_index, std::move(op.bytes));
    (void)writer_.finish_output(id);
    if (wiring_.gate == nullptr) (void)writer_.finish_input(id);
  }
  watchers_.spawn(watch(id));
  co_return io::result<void>();
}

bool stream_task::barrier_queued(const bf::buffer_view& barrier) const {
  for (std::size_t sub = 0; sub < wiring_.partition->subpartitions(); ++sub) {
    if (wiring_.partition->event_queued(barrier, sub)) return true;
  }
  return false;
}

// An aligned-with-timeout barrier still queued in the output when the alignment timeout (counted
// from when this task sent it) passes becomes a priority event; the data it overtakes is output
// channel state of the checkpoint. Checked every millisecond until then.
rt::task<void> stream_task::switch_after_timeout(ss::checkpoint_id id, bf::buffer_view barrier) {
  const auto deadline = std::chrono::steady_clock::now() + wiring_.alignment_timeout;
  while (barrier_queued(barrier) && std::chrono::steady_clock::now() < deadline) {
    const bool slept = co_await rt::sleep_for(std::chrono::milliseconds(1));
    if (!slept) co_return;  // the task is stopping
  }
  bf::result_partition& p = *wiring_.partition;
  std::uint64_t switched = 0;
  for (std::size_t sub = 0; sub < p.subpartitions(); ++sub) {
    std::optional<std::vector<bf::buffer_view>> overtaken = p.promote_event(barrier, sub);
    if (!overtaken) continue;
    ++switched;
    if (!overtaken->empty()) (void)writer_.add_output(id, 0, static_cast<std::uint32_t>(sub), std::move(*overtaken));
  }
  if (switched > 0) {
    runtime::log::debug("task {}: checkpoint {}: barrier overtook the output of {} channels after the alignment timeout",
                        wiring_.name, id, switched);
  }
  (void)writer_.finish_output(id);
}

rt::task<void> stream_task::watch(ss::checkpoint_id id) {
  const auto started = std::chrono::steady_clock::now();
  ss::checkpoint_outcome outcome = co_await writer_.result(id);
  runtime::log::debug("task {}: checkpoint {} state {} after {} us", wiring_.name, id,
                      outcome.completed() ? "durable" : "aborted",
                      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started).count());
  if (outcome.completed()) {
    ss::task_checkpoint_stats stats;
    stats.operator_state_bytes = outcome.operator_state_bytes;
    stats.channel_state_bytes = outcome.channel_state_bytes;
    stats.write_duration = std::chrono::steady_clock::now() - started;
    if (handler_ && handler_->last_stats() && handler_->last_stats()->id == id) {
      stats.alignment_duration = handler_->last_stats()->alignment_duration();
    }
    wiring_.coordinator->acknowledge(wiring_.id, id, std::move(stats));
  } else if (outcome.reason != ss::abort_reason::coordinator && outcome.reason != ss::abort_reason::cancelled) {
    wiring_.coordinator->decline(wiring_.id, id, outcome.reason, outcome.detail);
  }
}

}  // namespace sluice::dataflow::detail
