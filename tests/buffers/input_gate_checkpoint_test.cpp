// The input gate's support for checkpoints and failures: blocking channels, capturing queued data
// as views, view-held exclusive buffers, failing and releasing channels (scenario 17).
#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/runtime/when_any.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using sluice::test::virtual_time;

namespace {

constexpr std::size_t segment_bytes = 4096;

void send(input_gate& gate, std::uint32_t channel, std::uint64_t value, std::size_t backlog = 0) {
  std::byte bytes[sizeof value];
  std::memcpy(bytes, &value, sizeof value);
  gate.deliver(channel, bytes, backlog);
}

std::uint64_t value_of(std::span<const std::byte> bytes) {
  std::uint64_t v = 0;
  REQUIRE(bytes.size() == sizeof v);
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

task<void> blocked_channel_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 4, 8);
  input_gate gate(pool, {.channels = 2, .exclusive_per_channel = 2, .floating = 0});
  gate.take_credit_announcements();
  send(gate, 0, 1);
  send(gate, 1, 2);
  gate.block(0);
  std::optional<gate_item> a = gate.try_next();
  REQUIRE(a);
  CHECK(a->channel == 1);
  a.reset();
  CHECK_FALSE(gate.try_next());  // channel 0 holds data, but it is blocked
  gate.deliver_event(0, gate_event{gate_event::type::cancellation_marker, 7}, /*priority=*/true);
  std::optional<gate_item> marker = gate.try_next();  // priority events pass a block
  REQUIRE(marker);
  CHECK(marker->event->kind == gate_event::type::cancellation_marker);
  CHECK_FALSE(gate.try_next());
  gate.unblock(0);
  std::optional<gate_item> b = gate.try_next();
  REQUIRE(b);
  CHECK(b->channel == 0);
  CHECK(value_of(b->data.data()) == 1);
  CHECK(gate.check_credit_accounting().empty());
  co_return;
}

task<void> waiter_on_blocked(input_gate* gate) {
  std::optional<gate_item> item = co_await gate->next();
  REQUIRE(item);
  CHECK(item->channel == 0);
}

task<void> unblock_later(input_gate* gate) {
  co_await yield();
  co_await yield();
  gate->unblock_all();
}

task<void> unblock_wakes_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 4);
  input_gate gate(pool, {.channels = 1, .exclusive_per_channel = 2, .floating = 0});
  gate.take_credit_announcements();
  gate.block(0);
  send(gate, 0, 5);
  co_await when_all(waiter_on_blocked(&gate), unblock_later(&gate));
}

task<void> view_held_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 4);
  input_gate gate(pool, {.channels = 1, .exclusive_per_channel = 2, .floating = 0});
  CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 2}});
  send(gate, 0, 10);
  send(gate, 0, 11);
  std::vector<buffer_view> captured = gate.queued_data_views(0);
  REQUIRE(captured.size() == 2);
  CHECK(value_of(captured[0].data()) == 10);
  CHECK(value_of(captured[1].data()) == 11);

  // The task consumes both; the state writer still holds views: no credit comes back.
  for (int i = 0; i < 2; ++i) {
    std::optional<gate_item> item = gate.try_next();
    REQUIRE(item);
  }
  CHECK(gate.view_held(0) == 2);
  CHECK(gate.take_credit_announcements().empty());
  CHECK(gate.check_credit_accounting().empty());
  // The captured bytes stay intact: the segments are not reused while the views live.
  CHECK(value_of(captured[0].data()) == 10);

  // The first write completes: its view goes, and the credit pump wakes for one credit.
  captured[0].reset();
  const bool woke = co_await gate.wait_credit();
  CHECK(woke);
  CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 1}});
  captured[1].reset();
  CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 1}});
  CHECK(gate.view_held(0) == 0);
  CHECK(gate.check_credit_accounting().empty());
}

// A floating buffer the consumer releases while the state writer still views it stays charged to
// its channel (view-held, and in floating_in_use()) until the view goes: the identity holds at
// every step, and the gate never holds more than exclusive + floating segments.
task<void> view_held_floating_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  input_gate gate(pool, {.channels = 1, .exclusive_per_channel = 2, .floating = 1});
  CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 2}});
  send(gate, 0, 1, /*backlog=*/4);  // an exclusive buffer; the backlog asks for floating ones
  CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 1}});
  REQUIRE(gate.floating_in_use() == 1);
  send(gate, 0, 2, /*backlog=*/4);  // the floating buffer (used first)
  std::vector<buffer_view> state = gate.queued_data_views(0);
  REQUIRE(state.size() == 2);
  state.erase(state.begin());  // the writer keeps a view of the floating one only
  for (int i = 0; i < 2; ++i) {
    std::optional<gate_item> item = gate.try_next();  // the task consumes both and drops them
    REQUIRE(item);
    CHECK(item->data.is_floating() == (i == 1));
  }
  CHECK(gate.view_held(0) == 1);
  CHECK(gate.floating_in_use() == 1);
  CHECK(pool.in_use() == gate.segments_held());
  CHECK(gate.check_credit_accounting().empty());
  // The channel still has backlog, but the floating limit is reached while the view lives: only
  // the exclusive buffer comes back as credit, and no second floating buffer is lent.
  CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 1}});
  CHECK(pool.in_use() <= 2 + 1);
  CHECK(pool.in_use() == gate.segments_held());
  CHECK(value_of(state[0].data()) == 2);  // the captured bytes are intact

  // The write completes: the floating buffer goes back to the pool and, the backlog being there
  // still, is lent to the channel again as new credit.
  state.clear();
  const bool woke = co_await gate.wait_credit();
  CHECK(woke);
  CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 1}});
  CHECK(gate.view_held(0) == 0);
  CHECK(gate.floating_in_use() == 1);
  CHECK(pool.in_use() == gate.segments_held());
  CHECK(gate.check_credit_accounting().empty());
}

task<void> failed_channel_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 4, 8);
  input_gate gate(pool, {.channels = 2, .exclusive_per_channel = 2, .floating = 0});
  gate.take_credit_announcements();
  send(gate, 1, 3);
  gate.fail_channel(1, "connection to 10.0.0.2:7000 lost: Connection reset by peer");
  gate.fail_channel(1, "second failure is ignored");
  gate.deliver_end_of_partition(0);
  std::vector<gate_item> items;
  for (int i = 0; i < 3; ++i) {
    std::optional<gate_item> item = co_await gate.next();
    REQUIRE(item);
    items.push_back(std::move(*item));
  }
  CHECK(gate.finished());
  int failures = 0;
  for (const gate_item& item : items) failures += item.is_failure() ? 1 : 0;
  CHECK(failures == 1);
  CHECK(gate.failure(1) == "connection to 10.0.0.2:7000 lost: Connection reset by peer");
  std::optional<gate_item> end = co_await gate.next();
  CHECK_FALSE(end);
}

// Scenario 17: a channel released while buffers are being recycled to it.
task<void> released_channel_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 4, 12);
  {
    input_gate gate(pool, {.channels = 2, .exclusive_per_channel = 2, .floating = 2});
    gate.take_credit_announcements();
    send(gate, 0, 1, /*backlog=*/3);  // asks for floating buffers
    CHECK(gate.take_credit_announcements() == std::vector<credit_announcement>{{0, 2}});
    gate_buffer in_flight = gate.request_buffer_for(0);  // the transport is filling one
    std::optional<gate_item> held = gate.try_next();     // the task holds one
    REQUIRE(held);
    std::vector<buffer_view> state;                      // the writer holds a view of a queued one
    send(gate, 0, 2);
    state = gate.queued_data_views(0);
    REQUIRE(state.size() == 1);

    gate.release_channel(0);
    CHECK(gate.released(0));
    CHECK(gate.check_credit_accounting().empty());
    // Everything still out comes back to the pool, not to the released channel.
    in_flight.get().append(std::as_bytes(std::span("x", 1)));
    gate.deliver(std::move(in_flight), 0);  // dropped
    held.reset();
    CHECK(value_of(state[0].data()) == 2);  // the captured bytes outlive the release
    state.clear();
    gate.deliver_event(0, gate_event{gate_event::type::barrier, 1});  // ignored, no throw
    CHECK(gate.check_credit_accounting().empty());
    // The other channel carries on.
    send(gate, 1, 9);
    std::optional<gate_item> other = gate.try_next();
    REQUIRE(other);
    CHECK(other->channel == 1);
    CHECK(pool.in_use() == gate.segments_held());
  }
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  co_return;
}

}  // namespace

TEST_CASE("a blocked channel holds its data back while priority events still pass", "[gate][checkpoint]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(blocked_channel_body(&memory), virtual_time());
}

TEST_CASE("unblocking a channel wakes a consumer waiting in next()", "[gate][checkpoint]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(unblock_wakes_body(&memory), virtual_time());
}

TEST_CASE("a buffer the state writer still views is no credit until the view goes", "[gate][checkpoint]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(view_held_body(&memory), virtual_time());
}

TEST_CASE("a floating buffer the state writer still views stays charged to its channel until the view goes",
          "[gate][checkpoint]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(view_held_floating_body(&memory), virtual_time());
}

TEST_CASE("a failed channel ends with a channel_failed item that says why", "[gate]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(failed_channel_body(&memory), virtual_time());
}

TEST_CASE("scenario 17: a channel released while buffers are recycled to it loses nothing", "[gate][scenario]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(released_channel_body(&memory), virtual_time());
}

namespace {
task<bool> wait_item_of(input_gate* gate) { co_return co_await gate->wait_item(); }
task<bool> already_set(event* e) { co_return co_await e->wait(); }

task<void> wait_item_race_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 4);
  input_gate gate(pool, {.channels = 1, .exclusive_per_channel = 2, .floating = 0});
  gate.take_credit_announcements();
  event other(true);
  // Both branches are ready at once; whichever wins, the item stays in the gate.
  send(gate, 0, 42);
  auto r = co_await when_any(wait_item_of(&gate), already_set(&other));
  (void)r;
  std::optional<gate_item> item = gate.try_next();
  REQUIRE(item);
  CHECK(value_of(item->data.data()) == 42);
}
}  // namespace

TEST_CASE("wait_item takes nothing, so racing it in when_any loses no item", "[gate]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(wait_item_race_body(&memory), virtual_time());
}
