// Local channels: partition -> gate in one process, on one executor or across two, under the
// credit protocol (channel.hpp, local_channel.hpp).
#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/local_channel.hpp>
#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>
#include <support/run_on.hpp>
#include <support/sanitizers.hpp>

#include "channel_fixture.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using sluice::test::run_on;
using namespace sluice::test::channels;

namespace {

constexpr std::size_t segment_bytes = 4096;

// The whole run: sender on `a`, receiver on `b` (which may be the same executor).
task<receive_report> transfer(executor* a, executor* b, network_memory* memory, std::size_t ia, std::size_t ib,
                              std::size_t channels, std::uint64_t records, std::size_t sender_pool_max,
                              std::chrono::milliseconds flush) {
  std::unique_ptr<sender_side> s = co_await run_on(a, make_sender(&memory->pool(ia), channels, sender_pool_max, flush));
  std::unique_ptr<receiver_side> r = co_await run_on(b, make_receiver(&memory->pool(ib), channels, 8));
  for (std::uint32_t c = 0; c < channels; ++c) {
    s->channels.push_back(std::make_unique<local_channel>(s->partition, c, *a, r->gate, c, *b));
  }
  co_await run_on(b, connect_all(r.get(), s.get()));
  receive_report report;
  co_await when_all(run_on(a, run_senders(s.get(), records, &report)), run_on(b, run_receiver(r.get(), &report)));
  // Let the views the receiver dropped come home before the pools go.
  co_await run_on(b, destroy_receiver(std::move(r), &report));
  co_await run_on(a, destroy_sender(std::move(s), &report));
  co_return report;
}

task<receive_report> on_this_executor(network_memory* memory, std::size_t channels, std::uint64_t records,
                                      std::chrono::milliseconds flush) {
  executor* ex = executor::current();
  co_return co_await transfer(ex, ex, memory, 0, 0, channels, records, 8, flush);
}

// Scenario 21: the consumer does not read; the producer fills its pool and suspends.
task<void> slow_consumer_body(network_memory* memory) {
  executor* ex = executor::current();
  constexpr std::size_t pool_max = 6;
  sender_side s(memory->pool(0), 2, pool_max, std::chrono::milliseconds(0));
  receiver_side r(memory->pool(0), 2, 2);
  for (std::uint32_t c = 0; c < 2; ++c) s.channels.push_back(std::make_unique<local_channel>(s.partition, c, *ex, r.gate, c, *ex));
  for (std::uint32_t c = 0; c < 2; ++c) r.pump.connect(c, *s.channels[c]);
  std::vector<task<void>> senders;
  for (auto& ch : s.channels) senders.push_back(ch->sender().run());
  bool produced_all = false;
  task<void> producer = produce(&s.partition, 100'000, &produced_all);
  task<void> pump = r.pump.run();
  senders.push_back(std::move(producer));
  senders.push_back(std::move(pump));
  // Run everything but the consumer for a while (virtual time): the producer must stall.
  const bool finished = co_await with_timeout(join_all(std::move(senders)), std::chrono::seconds(5));
  CHECK_FALSE(finished);  // timed out: the producer could not finish without a consumer
  CHECK_FALSE(produced_all);
  CHECK(s.pool.held() <= pool_max);
  CHECK(r.gate.segments_held() <= 2 * 2 + 2);
  CHECK(r.gate.check_credit_accounting().empty());
  // Drop everything: the gate's queued buffers, the partition's queue.
  r.gate.release_channel(0);
  r.gate.release_channel(1);
  s.partition.release(0);
  s.partition.release(1);
}

// A barrier sent as a priority event overtakes the data queued in the partition and reaches the gate
// ahead of it; the overtaken buffers come back to the caller.
task<void> priority_barrier_body(network_memory* memory) {
  executor* ex = executor::current();
  sender_side s(memory->pool(0), 1, 16, std::chrono::milliseconds(0));
  receiver_side r(memory->pool(0), 1, 0);
  s.channels.push_back(std::make_unique<local_channel>(s.partition, 0, *ex, r.gate, 0, *ex));
  r.pump.connect(0, *s.channels[0]);
  for (std::uint64_t k = 0; k < 5; ++k) {
    const bool ok = co_await s.partition.emit(record_of(0, k), 0);
    REQUIRE(ok);
  }
  std::optional<buffer_view> barrier = make_event_buffer(s.pool, gate_event{gate_event::type::barrier, 7});
  REQUIRE(barrier);
  std::vector<buffer_view> overtaken = s.partition.add_priority_event(std::move(*barrier), 0);
  CHECK(overtaken.size() == 5);  // flush timeout 0: one buffer per record
  // Two credits only: the barrier (no credit needed) and two records go; three stay queued.
  r.gate.take_credit_announcements();  // the pump is not running: grant by hand
  s.channels[0]->sender().add_credit(2);
  task<void> sender = s.channels[0]->sender().run();
  auto done = co_await with_timeout(std::move(sender), std::chrono::milliseconds(10));
  CHECK_FALSE(done);
  std::optional<gate_item> first = r.gate.try_next();
  REQUIRE(first);
  REQUIRE(first->is_event());
  CHECK(first->event->kind == gate_event::type::barrier);
  CHECK(first->event->id == 7);
  CHECK(first->priority);
  CHECK(s.partition.backlog(0) == 3);
  overtaken.clear();
  first.reset();
  r.gate.release_channel(0);
  s.partition.release(0);
}

// The sender already waits for credit for the data at the head when a priority barrier is queued:
// the barrier needs no credit, so it must go at once, not when the next credit comes.
task<void> priority_while_waiting_for_credit_body(network_memory* memory) {
  executor* ex = executor::current();
  sender_side s(memory->pool(0), 1, 16, std::chrono::milliseconds(0));
  receiver_side r(memory->pool(0), 1, 0);
  s.channels.push_back(std::make_unique<local_channel>(s.partition, 0, *ex, r.gate, 0, *ex));
  r.pump.connect(0, *s.channels[0]);
  r.gate.take_credit_announcements();  // no credit is ever granted
  for (std::uint64_t k = 0; k < 3; ++k) {
    const bool ok = co_await s.partition.emit(record_of(0, k), 0);
    REQUIRE(ok);
  }
  task<void> sender = s.channels[0]->sender().run();
  scope running;
  running.spawn(std::move(sender));
  co_await sleep_for(std::chrono::milliseconds(5));  // it runs and waits for credit
  CHECK_FALSE(r.gate.try_next());
  std::optional<buffer_view> barrier = make_event_buffer(s.pool, gate_event{gate_event::type::barrier, 9});
  REQUIRE(barrier);
  std::vector<buffer_view> overtaken = s.partition.add_priority_event(std::move(*barrier), 0);
  CHECK(overtaken.size() == 3);
  co_await sleep_for(std::chrono::milliseconds(5));
  std::optional<gate_item> first = r.gate.try_next();
  REQUIRE(first);
  REQUIRE(first->is_event());
  CHECK(first->event->kind == gate_event::type::barrier);
  CHECK(first->event->id == 9);
  CHECK(s.partition.backlog(0) == 3);  // the data still waits for credit
  overtaken.clear();
  first.reset();
  running.request_stop();
  co_await running.join();
  r.gate.release_channel(0);
  s.partition.release(0);
}

}  // namespace

TEST_CASE("a priority event queued while the sender waits for credit goes at once", "[local][channel]") {
  network_memory memory(16 << 20, segment_bytes, 1);
  sync_wait(priority_while_waiting_for_credit_body(&memory), sluice::test::virtual_time());
}

TEST_CASE("local channels across executors carry 10 million records, none lost, duplicated or reordered",
          "[local][channel]") {
  constexpr std::uint64_t records = sluice::test::scaled_for_tsan(10'000'000);
  engine eng({.executors = 2, .handle_signals = false});
  network_memory memory(64 << 20, 32 << 10, 2);
  const receive_report report = eng.block_on(
      transfer(&eng.at(0), &eng.at(1), &memory, 0, 1, 8, records, 24, std::chrono::milliseconds(100)));
  CHECK(report.error.empty());
  CHECK(report.records == records);
  for (std::uint64_t n : report.per_channel) CHECK(n == records / 8);
  check_ends(report);
}

TEST_CASE("a local channel on one executor runs the same protocol, with flush timeout 0", "[local][channel]") {
  network_memory memory(16 << 20, segment_bytes, 1);
  const receive_report report = sync_wait(on_this_executor(&memory, 3, 30'000, std::chrono::milliseconds(0)));
  CHECK(report.error.empty());
  CHECK(report.records == 30'000);
  check_ends(report);
}

TEST_CASE("scenario 21: a slow consumer suspends the producer and memory stays at its bound", "[local][scenario]") {
  network_memory memory(16 << 20, segment_bytes, 1);
  sync_wait(slow_consumer_body(&memory), sluice::test::virtual_time());
}

TEST_CASE("a priority barrier overtakes queued data across a local channel", "[local][channel]") {
  network_memory memory(16 << 20, segment_bytes, 1);
  sync_wait(priority_barrier_body(&memory), sluice::test::virtual_time());
}
