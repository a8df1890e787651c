#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/plant.hpp>
#include <sluice/snapshot/barrier_handler.hpp>

#include <cassert>
#include <stdexcept>
#include <utility>

namespace sluice::snapshot {

using buffers::gate_event;

namespace {

handler_clock::time_point now() noexcept {
  runtime::executor* ex = runtime::executor::current();
  return ex != nullptr ? ex->now() : handler_clock::now();
}

}  // namespace

barrier_handler::barrier_handler(buffers::input_gate& gate, handler_options options)
    : barrier_handler(std::vector<buffers::input_gate*>{&gate}, options) {}

barrier_handler::barrier_handler(std::vector<buffers::input_gate*> gates, handler_options options)
    : gates_(std::move(gates)), options_(options) {
  if (gates_.empty()) throw std::invalid_argument("barrier_handler: needs at least one input gate");
  if (options_.alignment_timeout.count() < 0)
    throw std::invalid_argument("barrier_handler: negative alignment timeout " +
                                std::to_string(options_.alignment_timeout.count()) + " ms");
  std::size_t total = 0;
  for (std::size_t g = 0; g < gates_.size(); ++g) {
    if (gates_[g] == nullptr) throw std::invalid_argument("barrier_handler: gate " + std::to_string(g) + " is null");
    if (!gates_[g]->on_owner())
      throw std::invalid_argument("barrier_handler: gate " + std::to_string(g) +
                                  " belongs to another executor than the handler");
    gate_base_.push_back(total);
    total += gates_[g]->channels();
  }
  channels_.reserve(total);  // all bookkeeping is allocated here (scenario 14)
  for (std::size_t g = 0; g < gates_.size(); ++g) {
    for (std::size_t ch = 0; ch < gates_[g]->channels(); ++ch) {
      channels_.push_back(channel_info{gates_[g], static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(ch)});
    }
  }
}

void barrier_handler::check_owner() const noexcept {
  SLUICE_ASSERT(gates_.front()->on_owner(), "barrier handler used off its task's executor");
}

std::size_t barrier_handler::flat(std::uint32_t gate, std::uint32_t channel) const {
  assert(gate < gates_.size() && channel < gates_[gate]->channels());
  return gate_base_[gate] + channel;
}

std::string barrier_handler::channel_name(std::size_t c) const {
  const channel_info& ch = channels_[c];
  std::string name = "channel " + std::to_string(ch.channel);
  if (gates_.size() > 1) name = "gate " + std::to_string(ch.gate_index) + " " + name;
  return name;
}

bool barrier_handler::live(std::size_t c) const { return !channels_[c].gate->channel_ended(channels_[c].channel); }

bool barrier_handler::all_received() const {
  for (std::size_t c = 0; c < channels_.size(); ++c) {
    if (!channels_[c].received && live(c)) return false;
  }
  return true;
}

bool barrier_handler::is_capturing(std::uint32_t channel, std::uint32_t gate) const {
  check_owner();
  return phase_ == phase::capturing && channels_[flat(gate, channel)].capturing;
}

std::optional<handler_clock::time_point> barrier_handler::deadline() const noexcept {
  if (phase_ == phase::aligning && options_.mode == checkpoint_mode::aligned_timeout) return deadline_;
  return std::nullopt;
}

// --- entries ------------------------------------------------------------------------------------

barrier_actions barrier_handler::on_item(buffers::gate_item& item, std::uint32_t gate) {
  check_owner();
  const std::size_t c = flat(gate, item.channel);
  barrier_actions out;
  check_deadline(out);
  if (!item.is_event()) {
    on_data(c, item, out);
    return out;
  }
  const gate_event& e = *item.event;
  switch (e.kind) {
    case gate_event::type::barrier: on_barrier(c, e.id, item.priority, item.overtaken, out); break;
    case gate_event::type::cancellation_marker: on_marker(c, e.id, out); break;
    case gate_event::type::barrier_announcement: on_announcement(e.id, out); break;
    case gate_event::type::end_of_partition: on_channel_end(c, false, out); break;
    case gate_event::type::channel_failed: on_channel_end(c, true, out); break;
    case gate_event::type::custom:
    case gate_event::type::end_of_data:
    case gate_event::type::watermark: break;
  }
  check_deadline(out);  // aligned_timeout with a zero timeout switches at the first barrier
  return out;
}

barrier_actions barrier_handler::on_timer() {
  check_owner();
  barrier_actions out;
  check_deadline(out);
  return out;
}

barrier_actions barrier_handler::set_replaying(bool replaying) {
  check_owner();
  barrier_actions out;
  if (replaying && pending_ != no_checkpoint) {
    end_pending(out, abort_reason::not_ready, "not ready: replaying recovered channel state");
  }
  replaying_ = replaying;
  return out;
}

barrier_actions barrier_handler::abort(checkpoint_id id, abort_reason reason, std::string detail) {
  check_owner();
  barrier_actions out;
  if (id == no_checkpoint || id <= last_ended_ || (pending_ != no_checkpoint && id < pending_)) return out;
  if (id == pending_) {
    end_pending(out, reason, std::move(detail));
    return out;
  }
  if (pending_ != no_checkpoint) {
    end_pending(out, abort_reason::subsumed, "subsumed: checkpoint " + std::to_string(id) + " was aborted");
  }
  out.emplace_back(abort_checkpoint{id, reason, std::move(detail)});
  last_ended_ = id;
  return out;
}

// --- items --------------------------------------------------------------------------------------

void barrier_handler::on_barrier(std::size_t c, checkpoint_id id, bool priority, std::size_t overtaken,
                                 barrier_actions& out) {
  // Planted (FLINK-20654): an obsolete barrier is counted as the pending checkpoint's, so the data
  // its channel delivers before the pending checkpoint's own barrier is neither captured nor held back.
  if (SLUICE_PLANTED("obsolete-barrier-loss") && id != no_checkpoint && pending_ != no_checkpoint && id < pending_ &&
      !channels_[c].received) {
    received(c, priority, overtaken, out);
    return;
  }
  // Obsolete: already finished or aborted here, or older than the pending one. No I/O (scenario 5).
  if (id == no_checkpoint || id <= last_ended_ || (pending_ != no_checkpoint && id < pending_)) return;
  if (replaying_) {
    assert(pending_ == no_checkpoint);
    out.emplace_back(abort_checkpoint{id, abort_reason::not_ready, "not ready: replaying recovered channel state"});
    last_ended_ = id;
    return;
  }
  if (pending_ != no_checkpoint && id > pending_) {
    end_pending(out, abort_reason::subsumed,
                "subsumed by checkpoint " + std::to_string(id) + " (barrier on " + channel_name(c) + ")");
  }
  if (pending_ == no_checkpoint) {
    if (priority && options_.mode == checkpoint_mode::aligned) {
      out.emplace_back(abort_checkpoint{id, abort_reason::declined,
                                        "unaligned (priority) barrier on " + channel_name(c) +
                                            " but this task checkpoints aligned"});
      last_ended_ = id;
      return;
    }
    start(id, out);
  }
  if (channels_[c].received) return;  // a duplicate: the first one counted
  received(c, priority, overtaken, out);
}

// Aligned with a timeout: barrier `id` is queued in-band upstream of this task, maybe behind much
// data. The alignment (and its timeout) starts now rather than when a barrier is taken; when the
// timeout passes, the barriers queued in this task's gate overtake their data (start_capture).
void barrier_handler::on_announcement(checkpoint_id id, barrier_actions& out) {
  if (options_.mode != checkpoint_mode::aligned_timeout || replaying_) return;
  if (id == no_checkpoint || id <= last_ended_ || pending_ != no_checkpoint) return;
  start(id, out);
}

void barrier_handler::on_marker(std::size_t c, checkpoint_id id, barrier_actions& out) {
  if (id == no_checkpoint || id <= last_ended_ || (pending_ != no_checkpoint && id < pending_)) return;
  const std::string detail = "cancellation marker on " + channel_name(c);
  if (id == pending_) {
    end_pending(out, abort_reason::cancelled_by_barrier, detail);
    return;
  }
  if (pending_ != no_checkpoint) {
    end_pending(out, abort_reason::subsumed, "subsumed by the cancellation of checkpoint " + std::to_string(id));
  }
  out.emplace_back(abort_checkpoint{id, abort_reason::cancelled_by_barrier, detail});
  last_ended_ = id;
}

void barrier_handler::on_channel_end(std::size_t c, bool failed, barrier_actions& out) {
  channel_info& ch = channels_[c];
  ch.capturing = false;  // all its data before the end was taken (and captured, if capturing)
  if (pending_ == no_checkpoint) return;
  if (failed && !ch.received) {
    // Data sent before its barrier may be lost with the channel: the checkpoint would miss it.
    end_pending(out, abort_reason::declined,
                "input " + channel_name(c) + " failed before its barrier: " + ch.gate->failure(ch.channel));
    return;
  }
  maybe_complete(out);
}

void barrier_handler::on_data(std::size_t c, buffers::gate_item& item, barrier_actions& out) {
  channel_info& ch = channels_[c];
  // Scenario 12: a blocked channel's data after its barrier never reaches the task before the snapshot.
  assert(!(phase_ == phase::aligning && ch.received) && "data after a barrier taken before the aligned snapshot");
  if (phase_ != phase::capturing || !ch.capturing || !item.data.valid()) return;
  std::vector<buffers::buffer_view> views;
  views.push_back(item.data.get().retain());
  stats_.captured_bytes += views.back().size();
  ++stats_.captured_buffers;
  out.emplace_back(capture_input{pending_, ch.gate_index, ch.channel, std::move(views)});
}

// --- the pending checkpoint ---------------------------------------------------------------------

void barrier_handler::start(checkpoint_id id, barrier_actions& out) {
  assert(pending_ == no_checkpoint && phase_ == phase::idle && id > last_ended_);
  pending_ = id;
  stats_ = alignment_stats{};
  stats_.id = id;
  stats_.alignment_start = now();
  switch (options_.mode) {
    case checkpoint_mode::aligned:
      phase_ = phase::aligning;
      stats_.mode = checkpoint_mode::aligned;
      break;
    case checkpoint_mode::aligned_timeout:
      phase_ = phase::aligning;
      stats_.mode = checkpoint_mode::aligned;
      deadline_ = stats_.alignment_start + options_.alignment_timeout;
      break;
    case checkpoint_mode::unaligned:
      start_capture(out);
      break;
    case checkpoint_mode::at_least_once:
      phase_ = phase::counting;
      stats_.mode = checkpoint_mode::at_least_once;
      break;
  }
}

void barrier_handler::start_capture(barrier_actions& out) {
  phase_ = phase::capturing;
  stats_.mode = checkpoint_mode::unaligned;
  stats_.switched_at = now();
  out.emplace_back(trigger_snapshot{pending_, checkpoint_mode::unaligned});
  for (std::size_t c = 0; c < channels_.size(); ++c) {
    channel_info& ch = channels_[c];
    ch.capturing = !ch.received && live(c);
    // An aligned-with-timeout checkpoint switched: a barrier already queued in the gate overtakes the
    // data ahead of it, which is captured when it is taken (as a priority barrier's), so the
    // checkpoint does not wait until the task has processed that data (Flink's announcements).
    if (ch.capturing && options_.mode == checkpoint_mode::aligned_timeout && !SLUICE_PLANTED("queued-barrier-waits")) {
      (void)ch.gate->promote_barrier(ch.channel, pending_);
    }
  }
}

void barrier_handler::capture_overtaken(std::size_t c, std::size_t overtaken, barrier_actions& out) {
  const channel_info& ch = channels_[c];
  // Only what the barrier overtook: data delivered behind it since was sent after it.
  std::vector<buffers::buffer_view> views = ch.gate->queued_data_views(ch.channel, overtaken);
  if (views.empty()) return;
  for (const buffers::buffer_view& v : views) stats_.captured_bytes += v.size();
  stats_.captured_buffers += views.size();
  out.emplace_back(capture_input{pending_, ch.gate_index, ch.channel, std::move(views)});
}

void barrier_handler::received(std::size_t c, bool priority, std::size_t overtaken, barrier_actions& out) {
  channel_info& ch = channels_[c];
  ch.received = true;
  ch.capturing = false;
  if (phase_ == phase::aligning) {
    if (priority) {
      if (options_.mode == checkpoint_mode::aligned) {
        end_pending(out, abort_reason::declined,
                    "unaligned (priority) barrier on " + channel_name(c) + " but this task checkpoints aligned");
        return;
      }
      // aligned_timeout: the upstream switched to unaligned; so does this checkpoint.
      for (buffers::input_gate* g : gates_) g->unblock_all();
      start_capture(out);
    } else {
      ch.gate->block(ch.channel);
    }
  }
  // The data a priority barrier overtook was sent before it: in-flight data (an in-band one overtook
  // nothing: all data before it was taken, and captured on the way).
  if (phase_ == phase::capturing && priority) capture_overtaken(c, overtaken, out);
  maybe_complete(out);
}

void barrier_handler::maybe_complete(barrier_actions& out) {
  if (pending_ == no_checkpoint || !all_received()) return;
  stats_.alignment_end = now();
  switch (phase_) {
    case phase::aligning:
      for (buffers::input_gate* g : gates_) g->unblock_all();
      // With a timeout, the task's own barrier may still switch downstream: if it waits in the output
      // longer than the timeout, it overtakes that output (task_checkpoint::take_aligned).
      out.emplace_back(trigger_snapshot{pending_, options_.mode == checkpoint_mode::aligned_timeout
                                                      ? checkpoint_mode::aligned_timeout
                                                      : checkpoint_mode::aligned});
      break;
    case phase::capturing: out.emplace_back(finish_input{pending_}); break;
    case phase::counting: out.emplace_back(trigger_snapshot{pending_, checkpoint_mode::at_least_once}); break;
    case phase::idle: assert(false && "a pending checkpoint in the idle phase"); break;
  }
  last_stats_ = stats_;
  reset_pending(pending_);
}

void barrier_handler::check_deadline(barrier_actions& out) {
  if (options_.mode != checkpoint_mode::aligned_timeout) return;
  if (phase_ == phase::capturing) {
    // Switched: a barrier that reached the gate since, behind data, overtakes it as well.
    for (channel_info& ch : channels_) {
      if (ch.capturing && !SLUICE_PLANTED("queued-barrier-waits")) (void)ch.gate->promote_barrier(ch.channel, pending_);
    }
    return;
  }
  if (phase_ != phase::aligning) return;
  if (now() < deadline_) return;
  stats_.timed_out = true;
  // Blocked channels delivered their barrier: what is queued behind it is after the snapshot, not
  // channel state. The others are captured from here until their barrier.
  for (buffers::input_gate* g : gates_) g->unblock_all();
  start_capture(out);
  maybe_complete(out);
}

void barrier_handler::end_pending(barrier_actions& out, abort_reason reason, std::string detail) {
  assert(pending_ != no_checkpoint);
  if (phase_ == phase::aligning) {
    for (buffers::input_gate* g : gates_) g->unblock_all();
  }
  stats_.alignment_end = now();
  out.emplace_back(abort_checkpoint{pending_, reason, std::move(detail)});
  reset_pending(pending_);
}

void barrier_handler::reset_pending(checkpoint_id ended) {
  if (ended > last_ended_) last_ended_ = ended;
  pending_ = no_checkpoint;
  phase_ = phase::idle;
  for (channel_info& ch : channels_) ch.received = ch.capturing = false;
}

}  // namespace sluice::snapshot
