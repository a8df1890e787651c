#pragma once
// The two ends of a channel, whatever carries it (a local channel, a TCP connection).
//
// Credit protocol (Flink's, on executors instead of locks):
// - The RECEIVER is an input_gate channel. Each free buffer it holds for the channel is one credit.
//   A gate_credit_pump on the gate's executor waits for new credit (input_gate::wait_credit), takes
//   the announcements and hands each to the channel's credit_route, which carries it to the sender.
// - The SENDER is a subpartition_sender on the partition's executor. It sends a data buffer only
//   against a credit (one buffer, one credit) and reports its backlog with each buffer, so the gate
//   can assign floating buffers to a channel with much queued. Events need no credit. It stops after
//   sending end-of-partition, when the subpartition is released, when cancel() is called, or when
//   its task is stopped.
// - A channel_target carries what the sender sends to the receiver. Targets only ENQUEUE (post a
//   message, queue a frame); nothing of the receiver runs inside send() (invariant 3).
//
// Memory: a channel holds at most (exclusive + floating assigned) buffers at the receiver and the
// partition pool's bound at the sender; credit keeps the sender from outrunning the receiver, so a
// slow consumer holds the producer at its pool's bound (invariant 6).

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/input_gate.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::buffers {

class channel_target {
 public:
  virtual ~channel_target() = default;
  // On the sender's executor. `view` is a data buffer or an event (view.kind()); `backlog` is the
  // number of data buffers still queued behind it.
  virtual void send(buffer_view view, bool priority, std::size_t backlog) = 0;
};

class credit_route {
 public:
  virtual ~credit_route() = default;
  // On the gate's executor: `credits` new credits for the channel's sender.
  virtual void grant(std::uint32_t credits) = 0;
};

class subpartition_sender {
 public:
  // On the partition's executor.
  subpartition_sender(result_partition& partition, std::size_t subpartition, channel_target& target);
  subpartition_sender(const subpartition_sender&) = delete;
  subpartition_sender& operator=(const subpartition_sender&) = delete;

  // Owner executor only.
  void add_credit(std::uint32_t credits);
  std::uint64_t credits() const noexcept { return credits_; }
  // The receiver gave up: releases the subpartition (its queue is recycled) and ends run().
  void cancel();
  bool done() const noexcept { return done_; }
  std::uint64_t buffers_sent() const noexcept { return buffers_sent_; }

  // Sends until end-of-partition went out, the subpartition was released or cancel() was called;
  // returns early if the task is stopped.
  runtime::task<void> run();

 private:
  result_partition* partition_;
  std::size_t subpartition_;
  channel_target* target_;
  runtime::executor* owner_;
  std::uint64_t credits_ = 0;
  std::uint64_t buffers_sent_ = 0;
  bool cancelled_ = false;
  bool done_ = false;
  runtime::event credit_;
};

class gate_credit_pump {
 public:
  explicit gate_credit_pump(input_gate& gate);
  gate_credit_pump(const gate_credit_pump&) = delete;
  gate_credit_pump& operator=(const gate_credit_pump&) = delete;

  // Before run(): the route of `channel`'s credit. Every channel needs one.
  void connect(std::uint32_t channel, credit_route& route);
  // Forwards credit until the gate is finished; returns early if the task is stopped.
  runtime::task<void> run();

 private:
  input_gate* gate_;
  std::vector<credit_route*> routes_;
};

}  // namespace sluice::buffers
