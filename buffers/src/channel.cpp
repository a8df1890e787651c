#include <sluice/buffers/channel.hpp>
#include <sluice/runtime/assert.hpp>

#include <cassert>
#include <stdexcept>
#include <string>

namespace sluice::buffers {

subpartition_sender::subpartition_sender(result_partition& partition, std::size_t subpartition,
                                         channel_target& target)
    : partition_(&partition), subpartition_(subpartition), target_(&target), owner_(runtime::executor::current()) {
  if (subpartition >= partition.subpartitions())
    throw std::out_of_range("subpartition_sender: no subpartition " + std::to_string(subpartition));
}

void subpartition_sender::add_credit(std::uint32_t credits) {
  SLUICE_ASSERT(runtime::executor::current() == owner_, "subpartition_sender used off its executor");
  SLUICE_ASSERT(credits_ + credits >= credits_, "subpartition_sender: credit count overflows");
  credits_ += credits;
  credit_.set();
}

void subpartition_sender::cancel() {
  SLUICE_ASSERT(runtime::executor::current() == owner_, "subpartition_sender used off its executor");
  cancelled_ = true;
  partition_->release(subpartition_);  // wakes run() through wait_available
  credit_.set();
}

runtime::task<void> subpartition_sender::run() {
  SLUICE_ASSERT(runtime::executor::current() == owner_, "subpartition_sender run off its executor");
  result_partition& p = *partition_;
  const std::size_t i = subpartition_;
  // A priority event queued while this waits for credit wakes it: it goes without credit.
  p.set_priority_wake(i, &credit_);
  struct unwake {
    result_partition* p;
    std::size_t i;
    ~unwake() { p->set_priority_wake(i, nullptr); }
  } guard{&p, i};
  for (;;) {
    if (cancelled_ || p.released(i)) break;
    if (p.queued(i) == 0) {
      const bool available = co_await p.wait_available(i);
      if (!available) co_return;  // stopped
      continue;
    }
    if (p.next_is_data(i) && credits_ == 0) {
      credit_.reset();
      const bool credited = co_await credit_.wait();
      if (!credited) co_return;  // stopped
      continue;
    }
    std::optional<result_partition::polled> next = p.poll_next(i);
    assert(next.has_value());
    const bool data = next->view.kind() == buffer_kind::data;
    const bool last = !data && is_end_of_partition(next->view);
    if (data) {
      SLUICE_ASSERT(credits_ > 0, "subpartition_sender: a data buffer sent without credit");
      --credits_;
      ++buffers_sent_;
    }
    target_->send(std::move(next->view), next->priority, next->backlog);
    if (last) break;
  }
  done_ = true;
}

gate_credit_pump::gate_credit_pump(input_gate& gate) : gate_(&gate), routes_(gate.channels(), nullptr) {}

void gate_credit_pump::connect(std::uint32_t channel, credit_route& route) { routes_.at(channel) = &route; }

runtime::task<void> gate_credit_pump::run() {
  input_gate& gate = *gate_;
  for (;;) {
    for (const credit_announcement& a : gate.take_credit_announcements()) {
      credit_route* route = routes_[a.channel];
      assert(route != nullptr && "a gate channel without a credit route");
      route->grant(a.credits);
    }
    if (gate.finished()) co_return;
    const bool more = co_await gate.wait_credit();
    if (!more) co_return;  // stopped
  }
}

}  // namespace sluice::buffers
