// The input gate's checkpoint support (blocking, views of queued data), failing and releasing
// channels, and the credit accounting check (see input_gate.hpp).
#include "input_gate_internal.hpp"

#include <string>

namespace sluice::buffers {

using gate_detail::take_one;

void input_gate::block(std::uint32_t channel) {
  const accounting_guard at_exit{this};
  check_owner();
  at(channel).blocked = true;
}

void input_gate::unblock(std::uint32_t channel) {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = at(channel);
  if (!c.blocked) return;
  c.blocked = false;
  wake_consumers();
}

void input_gate::unblock_all() {
  const accounting_guard at_exit{this};
  check_owner();
  for (channel_state& c : channels_) c.blocked = false;
  wake_consumers();
}

std::vector<buffer_view> input_gate::queued_data_views(std::uint32_t channel, std::size_t max) {
  const accounting_guard at_exit{this};
  check_owner();
  std::vector<buffer_view> out;
  for (const entry& e : at(channel).queue) {
    if (out.size() == max) break;
    if (!e.event) out.push_back(e.buf.retain());
  }
  return out;
}

bool input_gate::promote_barrier(std::uint32_t channel, std::uint64_t id) {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = at(channel);
  std::size_t data_ahead = 0;
  for (std::size_t k = c.priority_front; k < c.queue.size(); ++k) {
    entry& e = c.queue[k];
    if (!e.event) {
      ++data_ahead;
      continue;
    }
    if (e.priority || e.event->kind != gate_event::type::barrier || e.event->id != id) continue;
    entry promoted = std::move(e);
    c.queue.erase(c.queue.begin() + static_cast<std::ptrdiff_t>(k));
    promoted.priority = true;
    promoted.overtaken = data_ahead;
    c.queue.insert(c.queue.begin() + static_cast<std::ptrdiff_t>(c.priority_front), std::move(promoted));
    ++c.priority_front;
    ++priority_pending_;
    priority_.set();
    make_ready(channel);
    wake_consumers();
    return true;
  }
  return false;
}

void input_gate::fail_channel(std::uint32_t channel, std::string why) {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = at(channel);
  if (c.released || c.end_delivered) return;
  deliver_event(channel, gate_event{gate_event::type::channel_failed, 0});
  c.failure = std::move(why);  // after: deliver_event drops events for a failed channel
}

void input_gate::release_channel(std::uint32_t channel) {
  const accounting_guard at_exit{this};
  check_owner();
  channel_state& c = at(channel);
  if (c.released) return;
  c.released = true;
  ++released_count_;
  c.end_delivered = true;
  c.blocked = false;
  const auto drop_floating = [&](std::size_t n) {
    SLUICE_ASSERT(c.floating_assigned >= n && floating_total_ >= n, "input gate: floating count below zero");
    c.floating_assigned -= n;
    floating_total_ -= n;
  };
  c.free_exclusive.clear();
  drop_floating(c.free_floating.size());
  c.free_floating.clear();
  for (parked_buffer& p : c.parked) {
    pool_->unwatch(p.buf);
    if (p.floating) drop_floating(1);  // its segment goes back to the pool when the view goes
  }
  SLUICE_ASSERT(parked_total_ >= c.parked.size(), "input gate: view-held count below zero");
  parked_total_ -= c.parked.size();
  c.parked.clear();
  for (entry& e : c.queue) {
    if (e.floating) drop_floating(1);
    if (e.priority) take_one(priority_pending_, "input gate: pending priority events below zero");
  }
  c.queue.clear();
  c.priority_front = 0;
  c.queued = 0;
  c.queued_events = 0;
  c.announced_unused = c.unannounced = 0;
  if (!c.ended) {
    c.ended = true;
    ++ended_;
  }
  distribute_floating();  // its floating buffers may serve the others
  credit_.set();
  wake_consumers();       // next() may now be finished
}

std::string input_gate::check_credit_accounting() const {
  std::string err;
  std::size_t floating_sum = 0;
  for (std::size_t i = 0; i < channels_.size(); ++i) {
    const channel_state& c = channels_[i];
    floating_sum += c.floating_assigned;
    if (c.released) continue;
    const std::size_t lhs = options_.exclusive_per_channel + c.floating_assigned;
    const std::size_t rhs =
        c.announced_unused + c.unannounced + c.sender_held + c.queued + c.consumer_held + c.parked.size();
    const std::size_t free_held = c.free_exclusive.size() + c.free_floating.size();
    if (lhs != rhs) {
      err += "channel " + std::to_string(i) + ": exclusive " + std::to_string(options_.exclusive_per_channel) +
             " + floating " + std::to_string(c.floating_assigned) + " != announced " +
             std::to_string(c.announced_unused) + " + unannounced " + std::to_string(c.unannounced) + " + sender " +
             std::to_string(c.sender_held) + " + queued " + std::to_string(c.queued) + " + consumer " +
             std::to_string(c.consumer_held) + " + view-held " + std::to_string(c.parked.size()) + "; ";
    }
    if (free_held != c.announced_unused + c.unannounced) {
      err += "channel " + std::to_string(i) + ": holds " + std::to_string(free_held) + " free buffers but " +
             std::to_string(c.announced_unused + c.unannounced) + " credits; ";
    }
    std::size_t data_in_queue = 0;
    for (const entry& e : c.queue) data_in_queue += e.event ? 0 : 1;
    if (c.queue.size() - data_in_queue != c.queued_events) {
      err += "channel " + std::to_string(i) + ": queue holds " + std::to_string(c.queue.size() - data_in_queue) +
             " events, counted " + std::to_string(c.queued_events) + "; ";
    }
    if (data_in_queue != c.queued) {
      err += "channel " + std::to_string(i) + ": queue holds " + std::to_string(data_in_queue) +
             " data buffers, counted " + std::to_string(c.queued) + "; ";
    }
  }
  if (floating_sum != floating_total_)
    err += "floating assigned sum " + std::to_string(floating_sum) + " != " + std::to_string(floating_total_) + "; ";
  if (floating_total_ > options_.floating)
    err += "floating in use " + std::to_string(floating_total_) + " > limit " + std::to_string(options_.floating) +
           "; ";
  if (pool_->in_use() < segments_held())
    err += "the gate counts " + std::to_string(segments_held()) + " segments but its pool has only " +
           std::to_string(pool_->in_use()) + " in use; ";
  return err;
}

#ifndef NDEBUG
// The identity of input_gate.hpp, at a mutator's exit. O(channels + queued items): debug only.
void input_gate::assert_credit_accounting() const noexcept {
  std::string err;
  try {
    err = check_credit_accounting();
  } catch (...) {
    return;  // out of memory while describing a fault: nothing to check with
  }
  if (!err.empty()) {
    runtime::detail::assertion_failed(__FILE__, __LINE__, "check_credit_accounting().empty()", err.c_str());
  }
}
#endif

}  // namespace sluice::buffers
