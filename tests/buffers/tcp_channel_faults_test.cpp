// Channel-table faults of the TCP transport fail one channel or close one connection, never more:
// more inputs to a peer than max_channels_per_connection, a peer that opens a channel in this side's
// id space, and a peer that floods a channel with events. And a gate fed from another executor gets
// its lent buffers back through its own inbox when a connection dies with buffers lent.
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/run_on.hpp>

#include "channel_fixture.hpp"
#include "tcp_fixture.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace sluice::test::channels;
using namespace sluice::test::tcp;
using sluice::test::run_on;

namespace {

constexpr std::uint64_t partition_id = 7;
constexpr auto stall = std::chrono::seconds(10);

task<void> open_into(tcp_transport* t, address peer, receiver_side* r, std::uint32_t first_sub,
                     std::vector<remote_input*>* inputs) {
  for (std::uint32_t c = 0; c < r->gate.channels(); ++c) {
    remote_input& in = t->open_input(peer, partition_id, first_sub + c, r->gate, c);
    r->pump.connect(c, in);
    inputs->push_back(&in);
  }
  co_return;
}

struct table_report {
  bool finished = false;  // nothing hung
  receive_report first, second;
  std::string second_failure;
  transport_stats receiving;
  std::size_t connections = 0;
};

// Gate 1 (2 channels) and gate 2 (1 channel) read subpartitions 0, 1 and 2 of one partition over a
// transport allowed 2 channels per connection. Gate 2 opens at once (`late` false: the channels wait
// for the dial together) or once gate 1's data flows (`late`: the connection is up).
task<void> table_body(network_memory* memory, bool late, table_report* out) {
  std::unique_ptr<tcp_transport> sending = co_await start_transport({});
  std::unique_ptr<tcp_transport> receiving = co_await start_transport({.max_channels_per_connection = 2});
  sender_side s(memory->pool(0), 3, 24, std::chrono::milliseconds(1));
  sending->serve_partition(partition_id, s.partition);
  receiver_side r1(memory->pool(0), 2, 4);
  receiver_side r2(memory->pool(0), 1, 0);
  std::vector<remote_input*> inputs;
  co_await open_into(receiving.get(), sending->local_address(), &r1, 0, &inputs);
  if (!late) co_await open_into(receiving.get(), sending->local_address(), &r2, 2, &inputs);
  receive_report produced;
  std::vector<task<void>> jobs;
  jobs.push_back(run_senders(&s, 3000, &produced));
  jobs.push_back(run_receiver(&r1, &out->first));
  if (late) {
    for (int i = 0; i < 10'000 && out->first.records == 0; ++i) (void)co_await sleep_for(std::chrono::milliseconds(1));
    co_await open_into(receiving.get(), sending->local_address(), &r2, 2, &inputs);
  }
  // Subpartition 2 is never requested: once its channel failed, drop what it queued, or the producer
  // would fill the pool with it and stop.
  const auto second = [](receiver_side* r, receive_report* rep, result_partition* p) -> task<void> {
    co_await run_receiver(r, rep);
    p->release(2);
  };
  jobs.push_back(second(&r2, &out->second, &s.partition));
  out->finished = co_await with_timeout(join_all(std::move(jobs)), stall);
  out->second_failure = r2.gate.failure(0);
  out->receiving = receiving->stats();
  out->connections = receiving->connections();
  co_await receiving->close();
  co_await sending->close();
  for (remote_input* in : inputs) (void)co_await in->wait_closed();
}

void check_table(const table_report& r) {
  REQUIRE(r.finished);
  CHECK(r.first.error.empty());
  CHECK(r.first.records == 2000);  // subpartitions 0 and 1 carried everything
  CHECK(r.second.records == 0);
  CHECK(r.second_failure.find("all 2 channels of the connection are open") != std::string::npos);
  CHECK(r.second_failure.find("max_channels_per_connection") != std::string::npos);
  CHECK(r.receiving.connections_failed == 0);  // the connection carried on
  CHECK(r.connections == 1);
}

// A fake process that accepts the transport's dial, takes its partition request and answers with
// a partition request of its own on channel 2: an even id, which is the dialing side's.
task<void> intruder(sluice::io::tcp_listener* listener, std::string* close_reason) {
  fake_peer p = co_await accept_peer(listener);
  peer_frame request = co_await p.next_control();
  if (request.ended) throw std::runtime_error("no partition request came");
  co_await p.send(bytes_of(encode_partition_request(2, 0, {partition_id, 0, 1})));
  for (;;) {
    peer_frame f = co_await p.next_control();
    if (f.ended) break;
    if (std::holds_alternative<close_connection>(f.payload)) *close_reason = f.close_reason;
  }
  // A second connection (gate 2's channel) is refused politely.
  fake_peer second = co_await accept_peer(listener);
  peer_frame again = co_await second.next_control();
  if (!again.ended) co_await second.send(bytes_of(encode_cancel(again.header.channel_id, 0)));
  // Then this process goes away: after the cancel, an orderly end of a connection without channels.
}

struct id_space_report {
  bool finished = false;
  std::string first_failure, second_failure, close_reason;
  transport_stats stats;
};

task<void> id_space_body(network_memory* memory, id_space_report* out) {
  auto listening = sluice::io::tcp_listener::listen(address::loopback_v4());
  sluice::io::tcp_listener listener = std::move(listening).value();
  std::unique_ptr<tcp_transport> t = co_await start_transport({});
  receiver_side r1(memory->pool(0), 1, 0);
  receiver_side r2(memory->pool(0), 1, 0);
  std::vector<remote_input*> inputs;
  co_await open_into(t.get(), listener.local_address(), &r1, 0, &inputs);
  receive_report rep1, rep2;
  const auto second = [](tcp_transport* tr, address peer, receiver_side* r, receiver_side* first,
                         std::vector<remote_input*>* ins, receive_report* rep) -> task<void> {
    // Once the first channel is over (the intruder's request came), a new input to that peer.
    for (int i = 0; i < 10'000 && !first->gate.channel_ended(0); ++i) (void)co_await sleep_for(std::chrono::milliseconds(1));
    co_await open_into(tr, peer, r, 0, ins);
    co_await run_receiver(r, rep);
  };
  std::vector<task<void>> jobs;
  jobs.push_back(intruder(&listener, &out->close_reason));
  jobs.push_back(run_receiver(&r1, &rep1));
  jobs.push_back(second(t.get(), listener.local_address(), &r2, &r1, &inputs, &rep2));
  out->finished = co_await with_timeout(join_all(std::move(jobs)), stall);
  out->first_failure = r1.gate.failure(0);
  out->second_failure = r2.gate.failure(0);
  out->stats = t->stats();
  co_await t->close();
  (void)co_await listener.close();
  for (remote_input* in : inputs) (void)co_await in->wait_closed();
}

// A fake sender that floods channel 0 with custom events, then answers the transport's cancel.
task<void> flooder(sluice::io::tcp_listener* listener, std::size_t events, bool* cancelled, event* seen) {
  fake_peer p = co_await accept_peer(listener);
  peer_frame request = co_await p.next_control();
  if (request.ended) throw std::runtime_error("no partition request came");
  std::vector<std::byte> flood;
  for (std::uint64_t i = 0; i < events; ++i) flood = concat(std::move(flood), event_frame(0, i, {gate_event::type::custom, i}));
  co_await p.send(std::move(flood));
  for (;;) {
    peer_frame f = co_await p.next_control();
    if (f.ended) break;
    if (std::holds_alternative<cancel_channel>(f.payload) && f.header.channel_id == 0) {
      *cancelled = true;
      co_await p.send(bytes_of(encode_cancel(0, events)));  // the answer: the channel is over
      break;
    }
  }
  (void)co_await seen->wait();  // the test looked at the transport while this process was still there
}

struct flood_report {
  bool finished = false;
  bool cancelled = false;
  bool input_closed = false;
  std::string failure;
  std::size_t queued_events = 0;
  std::size_t connections = 0;
  transport_stats stats;
};

task<void> flood_body(network_memory* memory, flood_report* out) {
  auto listening = sluice::io::tcp_listener::listen(address::loopback_v4());
  sluice::io::tcp_listener listener = std::move(listening).value();
  std::unique_ptr<tcp_transport> t = co_await start_transport({});
  local_buffer_pool pool(memory->pool(0), 2, 2);
  input_gate gate(pool, {.channels = 1, .exclusive_per_channel = 2, .floating = 0, .max_queued_events_per_channel = 16});
  gate.block(0);  // aligned alignment: nothing is consumed
  remote_input& in = t->open_input(listener.local_address(), partition_id, 0, gate, 0);
  const auto watch = [](remote_input* input, tcp_transport* tr, flood_report* o, event* seen) -> task<void> {
    o->input_closed = co_await input->wait_closed();
    o->connections = tr->connections();
    seen->set();
  };
  event seen;
  std::vector<task<void>> jobs;
  jobs.push_back(flooder(&listener, 10'000, &out->cancelled, &seen));
  jobs.push_back(watch(&in, t.get(), out, &seen));
  out->finished = co_await with_timeout(join_all(std::move(jobs)), stall);
  out->failure = gate.failure(0);
  out->queued_events = gate.queued_events(0);
  out->stats = t->stats();
  co_await t->close();
  (void)co_await listener.close();
  gate.release_channel(0);
}

}  // namespace

TEST_CASE("more inputs to one peer than max_channels_per_connection fail the extra ones only, while dialing",
          "[tcp][faults]") {
  network_memory memory(16 << 20, 32 << 10, 1);
  table_report r;
  sync_wait(table_body(&memory, false, &r));
  check_table(r);
}

TEST_CASE("more inputs to one peer than max_channels_per_connection fail the extra ones only, once connected",
          "[tcp][faults]") {
  network_memory memory(16 << 20, 32 << 10, 1);
  table_report r;
  sync_wait(table_body(&memory, true, &r));
  check_table(r);
}

TEST_CASE("a peer's partition request in this side's channel id space closes that connection with the reason",
          "[tcp][faults]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  id_space_report r;
  sync_wait(id_space_body(&memory, &r));
  REQUIRE(r.finished);
  CHECK(r.close_reason.find("this side's id space") != std::string::npos);
  CHECK(r.first_failure.find("this side's id space") != std::string::npos);
  CHECK(r.second_failure.find("refused channel") != std::string::npos);  // a new connection, a clean refusal
  REQUIRE_FALSE(r.stats.recent_failures.empty());
  CHECK(r.stats.recent_failures.front().find("id space") != std::string::npos);
  CHECK(r.stats.connections_failed == 1);
}

TEST_CASE("a peer that floods a blocked channel with events fails that channel and cancels it, the connection stays",
          "[tcp][faults][events]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  flood_report r;
  sync_wait(flood_body(&memory, &r));
  REQUIRE(r.finished);
  CHECK(r.failure.find("more than 16 events") != std::string::npos);
  CHECK(r.cancelled);
  CHECK(r.input_closed);
  CHECK(r.queued_events == 17);  // 16 events and channel_failed: the rest were dropped
  CHECK(r.connections == 1);     // the connection outlived the channel
  CHECK(r.stats.connections_failed == 0);
}
