// The input gate's credit protocol, sender side and consumer side (see input_gate.hpp).
// Checkpoint support, failure, release and the accounting check are in input_gate_control.cpp.
#include "input_gate_internal.hpp"

#include <algorithm>
#include <stdexcept>

namespace sluice::buffers {

using gate_detail::take_one;

std::string_view to_string(gate_event::type kind) noexcept {
  switch (kind) {
    case gate_event::type::end_of_partition: return "end-of-partition";
    case gate_event::type::barrier: return "barrier";
    case gate_event::type::cancellation_marker: return "cancellation-marker";
    case gate_event::type::channel_failed: return "channel-failed";
    case gate_event::type::custom: return "custom";
    case gate_event::type::end_of_data: return "end-of-data";
    case gate_event::type::watermark: return "watermark";
    case gate_event::type::barrier_announcement: return "barrier-announcement";
  }
  return "unknown";
}

input_gate::input_gate(local_buffer_pool& pool, gate_options options)
    : pool_(&pool), owner_(runtime::executor::current()), options_(options), channels_(options.channels) {
  if (options.channels == 0) throw std::invalid_argument("input_gate: needs at least one channel");
  if (options.max_queued_events_per_channel == 0)
    throw std::invalid_argument("input_gate: max_queued_events_per_channel must be at least 1");
  check_owner();
  const std::size_t wanted = options.channels * options.exclusive_per_channel;
  std::size_t got = 0;
  for (auto& c : channels_) {
    c.free_exclusive.reserve(options.exclusive_per_channel);
    for (std::size_t i = 0; i < options.exclusive_per_channel; ++i) {
      std::optional<buffer> b = pool.try_request();
      if (!b) {
        channels_.clear();  // returns what was taken
        throw std::runtime_error("input_gate: the buffer pool supplied only " + std::to_string(got) + " of the " +
                                 std::to_string(wanted) + " exclusive buffers (" + std::to_string(options.channels) +
                                 " channels x " + std::to_string(options.exclusive_per_channel) + ")");
      }
      c.free_exclusive.push_back(std::move(*b));
      ++got;
    }
    c.free_floating.reserve(options.floating);
    c.parked.reserve(options.exclusive_per_channel + options.floating);  // no allocation on the data path
    c.unannounced = options.exclusive_per_channel;
  }
  credit_.set();
  assert_credit_accounting();
}

input_gate::~input_gate() {
  closed_ = true;
  while (!waiters_.empty()) waiters_.front()->wake();  // result_ stays nullopt
  for (auto& c : channels_) {
    assert(c.sender_held == 0 && c.consumer_held == 0 && "input gate destroyed with gate_buffers outstanding");
    for (parked_buffer& p : c.parked) pool_->unwatch(p.buf);  // the views recycle the segments when they go
  }
}

input_gate::channel_state& input_gate::at(std::uint32_t channel) {
  if (channel >= channels_.size())
    throw std::out_of_range("input_gate: no channel " + std::to_string(channel) + " (gate has " +
                            std::to_string(channels_.size()) + ")");
  return channels_[channel];
}

std::size_t input_gate::deficit(const channel_state& c) const noexcept {
  const std::size_t credit = c.announced_unused + c.unannounced;
  return c.backlog > credit ? c.backlog - credit : 0;
}

std::vector<credit_announcement> input_gate::take_credit_announcements() {
  const accounting_guard at_exit{this};
  check_owner();
  reclaim_parked();
  distribute_floating();
  std::vector<credit_announcement> out;
  for (std::uint32_t i = 0; i < channels_.size(); ++i) {
    channel_state& c = channels_[i];
    if (c.unannounced == 0 || c.ended || c.end_delivered) continue;
    out.push_back({i, static_cast<std::uint32_t>(c.unannounced)});
    c.announced_unused += c.unannounced;
    c.unannounced = 0;
  }
  return out;
}

runtime::task<bool> input_gate::wait_priority() {
  if (priority_pending_ > 0) co_return true;
  priority_.reset();
  const bool set = co_await priority_.wait();
  co_return set;
}

runtime::task<bool> input_gate::wait_credit() {
  const bool set = co_await credit_.wait();
  if (set) credit_.reset();
  co_return set;
}

void input_gate::reclaim_parked() {
  if (parked_total_ == 0) return;
  for (channel_state& c : channels_) {
    for (std::size_t i = 0; i < c.parked.size();) {
      if (pool_->references(c.parked[i].buf) > 1) {
        ++i;
        continue;
      }
      parked_buffer p = std::move(c.parked[i]);
      c.parked[i] = std::move(c.parked.back());
      c.parked.pop_back();
      take_one(parked_total_, "input gate: view-held count below zero");
      pool_->unwatch(p.buf);
      if (p.floating) {
        release_floating(c, p.buf);  // distribute_floating() follows in take_credit_announcements
        continue;
      }
      buffer b = std::move(p.buf);
      b.clear();
      c.free_exclusive.push_back(std::move(b));
      ++c.unannounced;
    }
  }
}

gate_buffer input_gate::request_buffer_for(std::uint32_t channel) {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = at(channel);
  if (c.end_delivered)
    throw std::logic_error("input_gate: channel " + std::to_string(channel) + " already ended");
  if (c.announced_unused == 0)
    throw std::logic_error("input_gate: channel " + std::to_string(channel) +
                           " has no announced credit; a sender must send only against credit");
  // Floating buffers first (as Flink does): they are the ones to give back soonest.
  bool floating = !c.free_floating.empty();
  std::vector<buffer>& from = floating ? c.free_floating : c.free_exclusive;
  assert(!from.empty());
  buffer b = std::move(from.back());
  from.pop_back();
  take_one(c.announced_unused, "input gate: announced credit below zero");
  ++c.sender_held;
  return gate_buffer(this, channel, floating, gate_buffer::stage::sender, std::move(b));
}

void input_gate::deliver(gate_buffer&& filled, std::size_t backlog) {
  const accounting_guard at_exit{this};
  check_owner();
  if (filled.gate_ != this || filled.stage_ != gate_buffer::stage::sender)
    throw std::logic_error("input_gate: delivered a buffer that was not requested from this gate against credit");
  const std::uint32_t channel = filled.channel_;
  channel_state& c = channels_[channel];
  if (c.released || !c.failure.empty()) {
    filled.release();  // the channel is gone or failed: the segment goes back
    return;
  }
  filled.gate_ = nullptr;
  take_one(c.sender_held, "input gate: sender-held count below zero");
  ++c.queued;
  c.queue.push_back(entry{std::move(filled.buf_), filled.floating_, false, std::nullopt});
  note_backlog(channel, backlog);
  make_ready(channel);
  wake_consumers();
}

void input_gate::deliver(std::uint32_t channel, std::span<const std::byte> bytes, std::size_t backlog) {
  const accounting_guard at_exit{this};
  if (bytes.size() > pool_->segment_bytes())
    throw std::length_error("input_gate: " + std::to_string(bytes.size()) + " bytes exceed a segment of " +
                            std::to_string(pool_->segment_bytes()));
  gate_buffer b = request_buffer_for(channel);
  b.get().append(bytes);
  deliver(std::move(b), backlog);
}

bool input_gate::deliver_event(std::uint32_t channel, gate_event event, bool priority) {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = at(channel);
  if (c.released || !c.failure.empty()) return false;
  if (c.end_delivered)
    throw std::logic_error("input_gate: event after end-of-partition on channel " + std::to_string(channel));
  const bool ends = event.kind == gate_event::type::end_of_partition || event.kind == gate_event::type::channel_failed;
  if (ends) {
    c.end_delivered = true;
    priority = false;
  }
  if (!ends && !priority && event.kind == gate_event::type::watermark && !c.queue.empty()) {
    entry& last = c.queue.back();
    if (last.event && !last.priority && last.event->kind == gate_event::type::watermark) {
      last.event->id = std::max(last.event->id, event.id);  // one watermark says as much as both
      return true;
    }
  }
  if (!ends && c.queued_events >= options_.max_queued_events_per_channel) {
    fail_channel(channel, "channel " + std::to_string(channel) + " received more than " +
                              std::to_string(options_.max_queued_events_per_channel) +
                              " events that were not consumed (gate_options::max_queued_events_per_channel); its "
                              "sender floods it with " + std::string(to_string(event.kind)) + " events");
    return false;
  }
  ++c.queued_events;
  if (priority) {
    c.queue.insert(c.queue.begin() + static_cast<std::ptrdiff_t>(c.priority_front),
                   entry{buffer{}, false, true, event, c.queued});
    ++c.priority_front;
    ++priority_pending_;
    priority_.set();
  } else {
    c.queue.push_back(entry{buffer{}, false, false, event});
  }
  make_ready(channel);
  wake_consumers();
  return true;
}

void input_gate::note_sender_backlog(std::uint32_t channel, std::size_t backlog) {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = at(channel);
  if (c.released || c.end_delivered) return;
  note_backlog(channel, backlog);
}

void input_gate::note_backlog(std::uint32_t channel, std::size_t backlog) {
  channel_state& c = channels_[channel];
  c.backlog = backlog;
  if (deficit(c) > 0 && !c.waiting_for_floating) {
    c.waiting_for_floating = true;
    floating_waiting_.push_back(channel);
    credit_.set();  // the credit pump hands out floating buffers
  }
}

void input_gate::distribute_floating() {
  while (!floating_waiting_.empty() && floating_total_ < options_.floating) {
    const std::uint32_t channel = floating_waiting_.front();
    channel_state& c = channels_[channel];
    if (deficit(c) == 0 || c.end_delivered || c.released) {
      floating_waiting_.pop_front();
      c.waiting_for_floating = false;
      continue;
    }
    std::optional<buffer> b = pool_->try_request();
    if (!b) return;  // the pool is dry; stay first in line
    floating_waiting_.pop_front();
    c.free_floating.push_back(std::move(*b));
    ++c.floating_assigned;
    ++floating_total_;
    SLUICE_ASSERT(floating_total_ <= options_.floating, "input gate: more floating buffers than its limit");
    ++c.unannounced;
    credit_.set();
    if (deficit(c) > 0) {
      floating_waiting_.push_back(channel);  // one at a time: round-robin among the waiting
    } else {
      c.waiting_for_floating = false;
    }
  }
}

void input_gate::make_ready(std::uint32_t channel) {
  channel_state& c = channels_[channel];
  if (!c.in_ready && !c.queue.empty()) {
    c.in_ready = true;
    ready_.push_back(channel);
  }
}

bool input_gate::takeable(const channel_state& c) const noexcept {
  return !c.queue.empty() && (!c.blocked || c.priority_front > 0);
}

std::optional<gate_item> input_gate::try_next() {
  const accounting_guard at_exit{this};
  check_owner();
  // Priority events first; otherwise the first ready channel that is not blocked (round-robin).
  auto pos = ready_.end();
  for (auto it = ready_.begin(); it != ready_.end();) {
    const channel_state& c = channels_[*it];
    if (c.queue.empty()) {  // released since it became ready
      channels_[*it].in_ready = false;
      it = ready_.erase(it);
      continue;
    }
    if (priority_pending_ > 0 ? c.priority_front > 0 : takeable(c)) {
      pos = it;
      break;
    }
    ++it;
  }
  if (pos == ready_.end()) return std::nullopt;
  const std::uint32_t channel = *pos;
  ready_.erase(pos);
  channel_state& c = channels_[channel];
  c.in_ready = false;
  assert(!c.queue.empty());
  entry e = std::move(c.queue.front());
  c.queue.pop_front();

  gate_item item;
  item.channel = channel;
  if (e.event) {
    take_one(c.queued_events, "input gate: queued events below zero");
    if (e.priority) {
      take_one(c.priority_front, "input gate: priority events at the front below zero");
      take_one(priority_pending_, "input gate: pending priority events below zero");
    }
    item.event = e.event;
    item.priority = e.priority;
    item.overtaken = e.overtaken;
    if (e.event->kind == gate_event::type::end_of_partition || e.event->kind == gate_event::type::channel_failed) {
      mark_ended(c);
    }
  } else {
    take_one(c.queued, "input gate: queued data count below zero");
    ++c.consumer_held;
    item.data = gate_buffer(this, channel, e.floating, gate_buffer::stage::consumer, std::move(e.buf));
  }
  make_ready(channel);
  return item;
}

void input_gate::mark_ended(channel_state& c) {
  c.ended = true;
  ++ended_;
  credit_.set();  // a credit pump waiting on a finished gate notices
  // Credit of an ended channel is never used again: give its floating buffers back.
  while (!c.free_floating.empty()) {
    c.free_floating.pop_back();
    take_one(c.floating_assigned, "input gate: floating assigned below zero");
    take_one(floating_total_, "input gate: floating in use below zero");
    take_one(c.unannounced > 0 ? c.unannounced : c.announced_unused, "input gate: credit below zero");
  }
  distribute_floating();
}


bool input_gate::has_takeable() const noexcept {
  for (std::uint32_t ch : ready_) {
    if (takeable(channels_[ch])) return true;
  }
  return false;
}

runtime::task<bool> input_gate::wait_item() {
  while (!has_takeable() && !finished() && !closed_) {
    item_ready_.reset();
    const bool woke = co_await item_ready_.wait();
    if (!woke) co_return false;
  }
  co_return true;
}

void input_gate::wake_consumers() noexcept {
  item_ready_.set();
  while (!waiters_.empty()) {
    std::optional<gate_item> item = try_next();
    if (!item && !finished()) return;
    auto* w = static_cast<next_awaiter*>(waiters_.front());
    w->result_ = std::move(item);
    w->wake();  // schedules, never resumes inline
  }
}

void input_gate::release_floating(channel_state& c, buffer& b) noexcept {
  SLUICE_ASSERT(pool_->references(b) == 1,
                "input gate: a floating buffer went back to the pool while a view still holds it");
  take_one(c.floating_assigned, "input gate: floating assigned below zero");
  take_one(floating_total_, "input gate: floating in use below zero");
  b.reset();
}

void input_gate::send_home(gate_buffer& b) noexcept {
  SLUICE_ASSERT(owner_ != nullptr, "a gate_buffer of a gate without an executor was dropped on an executor");
  gate_buffer home(this, b.channel_, b.floating_, b.stage_, std::move(b.buf_));
  owner_->post([gate = this, h = std::move(home)]() mutable {
    ++gate->foreign_returns_;
    h.release();  // on the owner now: give_back
  });
}

void input_gate::give_back(gate_buffer& b) noexcept {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = channels_[b.channel_];
  if (b.stage_ == gate_buffer::stage::sender) {
    take_one(c.sender_held, "input gate: sender-held count below zero");
  } else {
    take_one(c.consumer_held, "input gate: consumer-held count below zero");
  }
  if (c.released) {
    if (b.floating_) {
      take_one(c.floating_assigned, "input gate: floating assigned below zero");
      take_one(floating_total_, "input gate: floating in use below zero");
    }
    b.buf_.reset();  // the channel is gone: straight back to the pool
    distribute_floating();
    return;
  }
  if (pool_->references(b.buf_) > 1) {
    // The channel-state writer still holds a view: the buffer stays charged to this channel,
    // exclusive or floating, and is no credit until the view goes (reclaim_parked).
    pool_->watch_unique(b.buf_, credit_);
    c.parked.push_back(parked_buffer{std::move(b.buf_), b.floating_});
    ++parked_total_;
    return;
  }
  if (b.floating_) {
    release_floating(c, b.buf_);  // back to the pool ...
    distribute_floating();        // ... and from there to the longest-waiting channel
    return;
  }
  b.buf_.clear();
  c.free_exclusive.push_back(std::move(b.buf_));
  ++c.unannounced;  // announced with the next take_credit_announcements()
  credit_.set();
}

}  // namespace sluice::buffers
