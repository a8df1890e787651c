#pragma once
// local_channel: one channel between a result_partition's subpartition and an input_gate channel in
// the same process, on the same executor or on two. It runs the credit protocol of channel.hpp.
//
// - Sender side (the partition's executor): run sender().run(). A data buffer it sends is posted to
//   the gate's executor, copied there into a buffer the gate lent against a credit, and delivered;
//   the partition's buffer is released on the gate's executor, which sends it home (invariant 2).
// - Receiver side (the gate's executor): connect the channel to the gate's gate_credit_pump; the
//   credit it grants is posted to the sender's executor.
// - A channel the gate fails (its event bound, input_gate.hpp) takes nothing more, and its sender is
//   cancelled by a message.
// - Messages between the two are executor posts, FIFO per sender, so a channel's buffers and events
//   arrive in order. On one executor they are direct calls of enqueue-only functions.
// - Lifetime: the channel must outlive every message it posted; destroy it after both executors
//   have stopped (a job owns its channels for the whole run), or after end-of-partition was consumed
//   and the credit pump has ended.
//
//   local_channel ch(out, 3, ex_a, gate, 0, ex_b);   // subpartition 3 -> gate channel 0
//   pump.connect(0, ch);                             // on ex_b
//   spawn_on(ex_a, ch.sender().run());

#include <sluice/buffers/channel.hpp>

#include <cstddef>
#include <cstdint>

namespace sluice::buffers {

class local_channel final : public channel_target, public credit_route {
 public:
  // On the partition's executor (the sender is created there).
  local_channel(result_partition& partition, std::size_t subpartition, runtime::executor& sender_executor,
                input_gate& gate, std::uint32_t gate_channel, runtime::executor& gate_executor);

  subpartition_sender& sender() noexcept { return sender_; }
  void send(buffer_view view, bool priority, std::size_t backlog) override;
  void grant(std::uint32_t credits) override;

  std::uint64_t buffers_delivered() const noexcept { return delivered_; }

 private:
  void receive(buffer_view view, bool priority, std::size_t backlog);

  runtime::executor* sender_executor_;
  input_gate* gate_;
  std::uint32_t gate_channel_;
  runtime::executor* gate_executor_;
  subpartition_sender sender_;
  std::uint64_t delivered_ = 0;  // gate executor only
  bool cancel_posted_ = false;   // gate executor only
};

}  // namespace sluice::buffers
