// See channel_wiring.hpp.

#include "channel_wiring.hpp"

#include <sluice/runtime/run_on.hpp>

#include <fmt/core.h>

#include <set>
#include <utility>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;

rt::task<io::result<void>> channel_wiring::start_loopback(unsigned executor) {
  io::result<std::unique_ptr<bf::tcp_transport>> t =
      co_await bf::tcp_transport::start(io::address::loopback_v4(), options_.transport);
  if (!t) co_return t.error();
  loopback_[executor] = std::move(t).value();
  co_return io::result<void>{};
}

rt::task<io::result<void>> channel_wiring::start_data_port() {
  io::result<std::unique_ptr<bf::tcp_transport>> t = co_await bf::tcp_transport::start(*options_.listen, options_.transport);
  if (!t) co_return t.error();
  data_ = std::move(t).value();
  co_return io::result<void>{};
}

rt::task<void> channel_wiring::serve(task_slot* producer, bf::tcp_transport* transport) {
  transport->serve_partition(producer->id, *producer->partition);
  co_return;
}

rt::task<void> channel_wiring::make_local_channel(task_slot* producer, task_slot* consumer, channel_plan c) {
  const std::uint32_t j = c.gate_channel;
  producer->senders.push_back(std::make_unique<bf::local_channel>(*producer->partition, c.subpartition,
                                                                  *producer->executor, *consumer->gate, j,
                                                                  *consumer->executor));
  co_return;
}

rt::task<void> channel_wiring::connect_pump(task_slot* consumer, std::uint32_t j, bf::credit_route* route) {
  consumer->pump->connect(j, *route);
  co_return;
}

rt::task<void> channel_wiring::open_remote(task_slot* consumer, bf::tcp_transport* transport, io::address peer,
                                           channel_plan channel) {
  bf::remote_input& in =
      transport->open_input(peer, channel.producer, channel.subpartition, *consumer->gate, channel.gate_channel);
  consumer->pump->connect(channel.gate_channel, in);
  consumer->remote_inputs.push_back(&in);
  co_return;
}

rt::task<io::result<void>> channel_wiring::connect() {
  const unsigned executors = static_cast<unsigned>(engine_.size());
  // Which transports this worker needs, and which partitions each serves.
  std::set<unsigned> loopback_on;
  bool data_port = false;
  for (const task_plan& t : plan_.tasks()) {
    if (!local(t.id)) continue;
    for (const channel_plan& c : plan_.inputs_of(t.id)) {
      if (c.transport != transport_kind::tcp) continue;
      if (local(c.producer)) {
        loopback_on.insert(slots_[c.producer].executor_index);
        loopback_on.insert(slots_[c.consumer].executor_index);
      } else {
        data_port = true;
      }
    }
    for (const channel_plan& c : plan_.outputs_of(t.id)) {
      if (!local(c.consumer)) data_port = true;
    }
  }
  loopback_.resize(executors);
  for (unsigned e : loopback_on) {
    io::result<void> started = co_await rt::run_on(&engine_.at(e), start_loopback(e));
    if (!started) co_return started.error();
  }
  if (data_port) {
    if (!options_.listen || options_.workers.size() != plan_.shape().workers) {
      co_return io::error(std::make_error_code(std::errc::invalid_argument), "a job across workers needs a data port and every worker's address");
    }
    io::result<void> started = co_await rt::run_on(&engine_.at(0), start_data_port());
    if (!started) co_return started.error();
  }
  // Partitions first, so an early request finds them.
  for (const task_plan& t : plan_.tasks()) {
    if (!local(t.id) || !slots_[t.id].partition) continue;
    bool on_loopback = false;
    bool on_data = false;
    for (const channel_plan& c : plan_.outputs_of(t.id)) {
      if (c.transport != transport_kind::tcp) continue;
      (local(c.consumer) ? on_loopback : on_data) = true;
    }
    task_slot* producer = &slots_[t.id];
    if (on_loopback) co_await rt::run_on(producer->executor, serve(producer, &loopback(producer->executor_index)));
    if (on_data) co_await rt::run_on(producer->executor, serve(producer, data_.get()));
  }
  if (options_.before_dialing) co_await options_.before_dialing();
  for (const task_plan& t : plan_.tasks()) {
    if (!local(t.id) || !slots_[t.id].gate) continue;
    task_slot* consumer = &slots_[t.id];
    for (const channel_plan& c : plan_.inputs_of(t.id)) {
      if (c.transport == transport_kind::local) {
        task_slot* producer = &slots_[c.producer];
        co_await rt::run_on(producer->executor, make_local_channel(producer, consumer, c));
        co_await rt::run_on(consumer->executor, connect_pump(consumer, c.gate_channel, producer->senders.back().get()));
      } else if (local(c.producer)) {
        const io::address peer = loopback(slots_[c.producer].executor_index).local_address();
        co_await rt::run_on(consumer->executor, open_remote(consumer, &loopback(consumer->executor_index), peer, c));
      } else {
        const io::address peer = options_.workers[plan_.task(c.producer).worker];
        co_await rt::run_on(consumer->executor, open_remote(consumer, data_.get(), peer, c));
      }
    }
  }
  co_return io::result<void>{};
}

rt::task<void> channel_wiring::wait_closed(task_slot* slot) {
  for (bf::remote_input* in : slot->remote_inputs) (void)co_await in->wait_closed();
}

rt::task<void> channel_wiring::wait_remote_closed() {
  for (task_slot& slot : slots_) {
    if (slot.executor != nullptr && !slot.remote_inputs.empty()) co_await rt::run_on(slot.executor, wait_closed(&slot));
  }
}

rt::task<void> channel_wiring::close_one(bf::tcp_transport* transport) { co_await transport->close(); }

rt::task<void> channel_wiring::expect_close_one(bf::tcp_transport* transport) {
  transport->expect_close();
  co_return;
}

rt::task<void> channel_wiring::close() {
  // Every executor's transport first learns that the others close too: the first one closed sends
  // its peers a close frame, which on channels a stopped job left open is no failure.
  for (std::size_t e = 0; e < loopback_.size(); ++e) {
    if (loopback_[e]) co_await rt::run_on(&engine_.at(e), expect_close_one(loopback_[e].get()));
  }
  for (std::size_t e = 0; e < loopback_.size(); ++e) {
    if (loopback_[e]) co_await rt::run_on(&engine_.at(e), close_one(loopback_[e].get()));
  }
  if (data_) co_await rt::run_on(&engine_.at(0), close_one(data_.get()));
}

}  // namespace sluice::dataflow::detail
