#pragma once
// channel_wiring: connects the channels of one worker's tasks as the job plan says (job_plan.hpp),
// and owns the TCP transports that carry the remote ones.
//
// - local: a local_channel from the producer's partition into the consumer's gate (buffers/
//   local_channel.hpp), made on the producer's executor, its credit route connected on the
//   consumer's.
// - tcp within the worker: one loopback transport per executor (port 0), started on that executor;
//   the consumer's transport dials the producer's.
// - tcp between workers: the worker's data port, one transport on executor 0 listening on
//   wiring_options::listen; a consumer dials the producer worker's advertised address.
// A partition is served on every transport one of its consumers dials; a gate channel's credit
// route is its local channel or its remote input.
//
// Lifetime: connect() once, on the runner's executor, after every local task was made; then
// wait_remote_closed() after a clean end by the data (every producer finished its partition: never
// after a stop, whose producers stopped where they were), close() before the tasks are
// destroyed (on every outcome), and destroy the wiring after the engine stopped (tcp_transport.hpp).

#include "task_slot.hpp"

#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/io/address.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/task.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace sluice::dataflow::detail {

struct wiring_options {
  unsigned worker = 0;  // this worker's index in the plan
  // The data port (required when the plan has more than one worker), and every worker's advertised
  // address, by worker index.
  std::optional<io::address> listen;
  std::vector<io::address> workers;
  buffers::transport_options transport;
  // Awaited after this worker's ports listen and serve, before it dials any (cluster_link).
  std::function<runtime::task<void>()> before_dialing;
};

class channel_wiring {
 public:
  // `slots` is indexed by task id; the tasks of other workers have no executor.
  channel_wiring(const job_plan& plan, std::vector<task_slot>& slots, runtime::engine& engine, wiring_options options)
      : plan_(plan), slots_(slots), engine_(engine), options_(std::move(options)) {}

  // Starts the transports this worker needs and connects every channel into and out of its tasks.
  runtime::task<io::result<void>> connect();
  // Every remote input into this worker's tasks closed (its producer ended its partition).
  runtime::task<void> wait_remote_closed();
  // Closes every transport (idempotent).
  runtime::task<void> close();

  // The data port's transport (nullptr with one worker).
  buffers::tcp_transport* data_port() const noexcept { return data_.get(); }

 private:
  bool local(snapshot::task_id id) const { return slots_[id].executor != nullptr; }
  buffers::tcp_transport& loopback(unsigned executor) { return *loopback_[executor]; }
  runtime::task<io::result<void>> start_loopback(unsigned executor);
  runtime::task<io::result<void>> start_data_port();
  runtime::task<void> serve(task_slot* producer, buffers::tcp_transport* transport);
  runtime::task<void> make_local_channel(task_slot* producer, task_slot* consumer, channel_plan channel);
  runtime::task<void> connect_pump(task_slot* consumer, std::uint32_t j, buffers::credit_route* route);
  runtime::task<void> open_remote(task_slot* consumer, buffers::tcp_transport* transport, io::address peer,
                                  channel_plan channel);
  runtime::task<void> wait_closed(task_slot* slot);
  runtime::task<void> close_one(buffers::tcp_transport* transport);
  runtime::task<void> expect_close_one(buffers::tcp_transport* transport);

  const job_plan& plan_;
  std::vector<task_slot>& slots_;
  runtime::engine& engine_;
  wiring_options options_;
  std::vector<std::unique_ptr<buffers::tcp_transport>> loopback_;  // by executor, when used
  std::unique_ptr<buffers::tcp_transport> data_;
};

}  // namespace sluice::dataflow::detail
