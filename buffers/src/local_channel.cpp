#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/local_channel.hpp>
#include <sluice/runtime/assert.hpp>

#include <cassert>

namespace sluice::buffers {

local_channel::local_channel(result_partition& partition, std::size_t subpartition,
                             runtime::executor& sender_executor, input_gate& gate, std::uint32_t gate_channel,
                             runtime::executor& gate_executor)
    : sender_executor_(&sender_executor),
      gate_(&gate),
      gate_channel_(gate_channel),
      gate_executor_(&gate_executor),
      sender_(partition, subpartition, *this) {}

void local_channel::send(buffer_view view, bool priority, std::size_t backlog) {
  if (gate_executor_ == sender_executor_) {
    receive(std::move(view), priority, backlog);
    return;
  }
  gate_executor_->post([this, v = std::move(view), priority, backlog]() mutable {
    receive(std::move(v), priority, backlog);
  });
}

void local_channel::receive(buffer_view view, bool priority, std::size_t backlog) {
  SLUICE_ASSERT(runtime::executor::current() == gate_executor_, "local_channel: delivery off the gate's executor");
  input_gate& gate = *gate_;
  // A released or failed channel takes nothing more; the view goes home when it is dropped.
  if (gate.released(gate_channel_) || gate.failed(gate_channel_)) return;
  if (view.kind() == buffer_kind::data) {
    gate.deliver(gate_channel_, view.data(), backlog);  // uses the credit the sender spent
    ++delivered_;
    return;
  }
  std::optional<gate_event> event = decode_event(view.data());
  assert(event.has_value() && "a local partition queued an event that does not decode");
  if (!event) return;
  const bool queued = gate.deliver_event(gate_channel_, *event, priority);
  if (!queued && gate.failed(gate_channel_) && !cancel_posted_) {
    // The gate failed the channel (its event bound): stop the sender. Posted even on one executor,
    // so nothing of the sender runs inside its own send() (invariant 3).
    cancel_posted_ = true;
    sender_executor_->post([this] { sender_.cancel(); });
  }
}

void local_channel::grant(std::uint32_t credits) {
  if (gate_executor_ == sender_executor_) {
    sender_.add_credit(credits);
    return;
  }
  sender_executor_->post([this, credits] { sender_.add_credit(credits); });
}

}  // namespace sluice::buffers
