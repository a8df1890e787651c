// Events at an input gate are bounded like data (input_gate.hpp): watermarks merge, any other flood
// fails that channel alone, over a local channel the sender is cancelled; and a gate_buffer dropped
// on another executor goes home by message.
#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/input_gate.hpp>
#include <sluice/buffers/local_channel.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/backends.hpp>
#include <support/run_on.hpp>

#include "channel_fixture.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace sluice::test::channels;
using sluice::test::run_on;

namespace {

constexpr std::size_t segment_bytes = 4096;

gate_event watermark(std::uint64_t t) { return {gate_event::type::watermark, t}; }

task<void> million_watermarks_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 4, 4);
  input_gate gate(pool, {.channels = 2, .exclusive_per_channel = 2, .floating = 0});
  gate.block(0);  // aligned alignment: the consumer takes nothing from channel 0
  for (std::uint64_t t = 1; t <= 1'000'000; ++t) CHECK(gate.deliver_event(0, watermark(t)));
  CHECK(gate.queued_events(0) == 1);
  // Anything between two watermarks keeps them apart; a priority event goes ahead of them.
  CHECK(gate.deliver_event(0, {gate_event::type::barrier, 3}));
  CHECK(gate.deliver_event(0, watermark(2'000'000)));
  CHECK(gate.deliver_event(0, {gate_event::type::barrier, 4}, true));
  CHECK(gate.deliver_event(0, watermark(2'000'001)));
  CHECK(gate.queued_events(0) == 4);
  CHECK(gate.check_credit_accounting().empty());
  gate.unblock(0);
  std::vector<std::pair<gate_event::type, std::uint64_t>> seen;
  while (std::optional<gate_item> item = gate.try_next()) seen.emplace_back(item->event->kind, item->event->id);
  CHECK(seen == std::vector<std::pair<gate_event::type, std::uint64_t>>{{gate_event::type::barrier, 4},
                                                                       {gate_event::type::watermark, 1'000'000},
                                                                       {gate_event::type::barrier, 3},
                                                                       {gate_event::type::watermark, 2'000'001}});
  CHECK(gate.queued_events(0) == 0);
  gate.release_channel(0);
  gate.release_channel(1);
  co_return;
}

task<void> event_flood_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 4, 4);
  input_gate gate(pool, {.channels = 2, .exclusive_per_channel = 2, .floating = 0,
                         .max_queued_events_per_channel = 8});
  gate.take_credit_announcements();
  gate_buffer in_flight = gate.request_buffer_for(0);  // the sender holds it while the flood comes
  gate.block(0);
  for (std::uint64_t i = 0; i < 8; ++i) CHECK(gate.deliver_event(0, {gate_event::type::custom, i}));
  CHECK_FALSE(gate.failed(0));
  CHECK_FALSE(gate.deliver_event(0, {gate_event::type::custom, 8}));  // one too many
  CHECK(gate.failed(0));
  CHECK(gate.failure(0).find("more than 8 events") != std::string::npos);
  CHECK(gate.failure(0).find("custom") != std::string::npos);
  // Whatever comes later on the failed channel is dropped, data included, and nothing throws.
  CHECK_FALSE(gate.deliver_event(0, {gate_event::type::barrier, 1}, true));
  CHECK_FALSE(gate.deliver_event(0, {gate_event::type::end_of_partition, 0}));
  in_flight.get().append(std::vector<std::byte>(8, std::byte{1}));
  gate.deliver(std::move(in_flight), 0);
  CHECK(gate.queued(0) == 0);
  // The other channel is untouched.
  CHECK(gate.deliver_event(1, {gate_event::type::barrier, 1}));
  CHECK_FALSE(gate.failed(1));
  CHECK(gate.check_credit_accounting().empty());
  gate.unblock(0);
  std::size_t events = 0;
  bool failed_seen = false;
  while (std::optional<gate_item> item = gate.try_next()) {
    if (item->channel != 0) continue;
    if (item->is_failure()) failed_seen = true;
    else ++events;
  }
  CHECK(events == 8);
  CHECK(failed_seen);
  CHECK(gate.channel_ended(0));
  CHECK(gate.check_credit_accounting().empty());
  gate.release_channel(1);
  co_return;
}

// A local sender that floods its channel with events while the gate holds the channel blocked.
task<void> local_flood_body(network_memory* memory) {
  executor* ex = executor::current();
  sender_side s(memory->pool(0), 1, 32, std::chrono::milliseconds(0));
  local_buffer_pool gate_pool(memory->pool(0), 2, 2);
  input_gate gate(gate_pool, {.channels = 1, .exclusive_per_channel = 2, .floating = 0,
                              .max_queued_events_per_channel = 8});
  local_channel channel(s.partition, 0, *ex, gate, 0, *ex);
  gate.block(0);
  scope running;
  running.spawn(channel.sender().run());
  for (std::uint64_t i = 0; i < 20; ++i) {
    std::optional<buffer_view> e = make_event_buffer(s.pool, {gate_event::type::custom, i});
    REQUIRE(e);
    s.partition.add_event(std::move(*e), 0);
  }
  for (int i = 0; i < 1000 && !channel.sender().done(); ++i) co_await yield();
  CHECK(channel.sender().done());  // cancelled by the gate's side
  CHECK(s.partition.released(0));
  CHECK(gate.failed(0));
  CHECK(gate.failure(0).find("more than 8 events") != std::string::npos);
  CHECK(gate.queued_events(0) == 9);  // 8 events and channel_failed
  co_await running.join();
  gate.unblock(0);
  while (gate.try_next()) {
  }
  CHECK(gate.channel_ended(0));
  CHECK(gate.check_credit_accounting().empty());
}

// A3: a gate_buffer dropped on another executor (a transport's) goes home by the gate's inbox.
struct gate_on_b {
  local_buffer_pool pool;
  input_gate gate;
  explicit gate_on_b(segment_pool& segments)
      : pool(segments, 2, 2), gate(pool, {.channels = 1, .exclusive_per_channel = 2, .floating = 0}) {}
};
task<std::unique_ptr<gate_on_b>> make_gate(segment_pool* segments) { co_return std::make_unique<gate_on_b>(*segments); }
task<std::vector<gate_buffer>> lend_two(gate_on_b* g) {
  g->gate.take_credit_announcements();
  std::vector<gate_buffer> out;
  out.push_back(g->gate.request_buffer_for(0));  // sender stage
  gate_buffer filled = g->gate.request_buffer_for(0);
  filled.get().append(std::vector<std::byte>(4, std::byte{7}));
  g->gate.deliver(std::move(filled), 0);
  std::optional<gate_item> item = g->gate.try_next();
  out.push_back(std::move(item->data));  // consumer stage
  co_return out;
}
task<bool> drop_here(std::vector<gate_buffer> buffers) {
  const bool foreign = !buffers.empty() && executor::current() != nullptr;
  buffers.clear();  // on the other executor
  co_return foreign;
}
struct gate_state {
  bool dropped_elsewhere = false;
  std::uint64_t foreign_returns = 0;
  std::vector<credit_announcement> credit;
  std::string accounting;
};
task<gate_state> look(gate_on_b* g) {
  for (int i = 0; i < 100 && g->gate.foreign_returns() < 2; ++i) co_await yield();
  co_return gate_state{false, g->gate.foreign_returns(), g->gate.take_credit_announcements(),
                       g->gate.check_credit_accounting()};
}
task<void> destroy(std::unique_ptr<gate_on_b> g) {
  g.reset();
  co_return;
}
task<gate_state> foreign_drop_body(executor* a, executor* b, network_memory* memory) {
  std::unique_ptr<gate_on_b> g = co_await run_on(b, make_gate(&memory->pool(1)));
  std::vector<gate_buffer> lent = co_await run_on(b, lend_two(g.get()));
  const bool dropped = co_await run_on(a, drop_here(std::move(lent)));
  gate_state state = co_await run_on(b, look(g.get()));
  state.dropped_elsewhere = dropped;
  co_await run_on(b, destroy(std::move(g)));
  co_return state;
}

}  // namespace

TEST_CASE("a million watermarks at a channel blocked for alignment merge into one queued event", "[gate][events]") {
  network_memory memory(1 << 20, segment_bytes, 1);
  sync_wait(million_watermarks_body(&memory));
}

TEST_CASE("events beyond a channel's bound fail that channel only, with the reason, and later input is dropped",
          "[gate][events]") {
  network_memory memory(1 << 20, segment_bytes, 1);
  sync_wait(event_flood_body(&memory));
}

TEST_CASE("a local sender that floods a blocked channel with events is cancelled and the channel fails",
          "[local][events]") {
  network_memory memory(4 << 20, segment_bytes, 1);
  sync_wait(local_flood_body(&memory), sluice::test::virtual_time());
}

TEST_CASE("gate buffers dropped on another executor come home through the gate's inbox", "[gate][executors]") {
  engine eng({.executors = 2, .handle_signals = false});
  network_memory memory(1 << 20, segment_bytes, 2);
  const gate_state state = eng.block_on(foreign_drop_body(&eng.at(0), &eng.at(1), &memory));
  eng.stop();
  CHECK(state.dropped_elsewhere);
  CHECK(state.foreign_returns == 2);
  CHECK(state.credit == std::vector<credit_announcement>{{0, 2}});  // both are credit again
  CHECK(state.accounting.empty());
}
