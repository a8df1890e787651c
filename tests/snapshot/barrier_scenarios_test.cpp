// docs/scenarios.md 5, 10, 11, 12, 13 and 14 for the barrier handler, each interleaving forced by
// delivering items into a real input_gate in a chosen order.
#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/snapshot/barrier_handler.hpp>

#include <snapshot/barrier_harness.hpp>
#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace sluice::snapshot;
using namespace std::chrono_literals;
using sluice::test::barrier;
using sluice::test::harness;
using sluice::test::marker;
using sluice::test::put;
using sluice::test::virtual_time;
using strings = std::vector<std::string>;

namespace {

constexpr std::size_t segment_bytes = 4096;
constexpr gate_options three_channels{.channels = 3, .exclusive_per_channel = 6, .floating = 0};

// Takes one item and hands it to the handler, returning the handler's actions untouched.
barrier_actions take_one(input_gate& gate, barrier_handler& handler) {
  std::optional<gate_item> item = gate.try_next();
  REQUIRE(item);
  return handler.on_item(*item);
}

task<void> scenario_5_body(network_memory* memory, checkpoint_mode mode) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = mode});
    harness h(gate, handler);
    const bool priority = mode == checkpoint_mode::unaligned;
    put(gate, 1, "1a");
    barrier(gate, 0, 2, priority);
    h.drain();
    CHECK(handler.pending() == 2);
    // Barrier 1 arrives after 2 started: no action at all, no capture of its queue, no block.
    barrier(gate, 2, 1, priority);
    put(gate, 2, "2a");
    barrier_actions late = take_one(gate, handler);
    CHECK(late.empty());
    CHECK(handler.pending() == 2);
    CHECK_FALSE(gate.blocked(2));
    if (mode == checkpoint_mode::unaligned) CHECK(handler.is_capturing(2));  // still in flight for 2
    h.drain();
    for (std::uint32_t c = 1; c < 3; ++c) barrier(gate, c, 2, priority);
    h.drain();
    CHECK(handler.pending() == no_checkpoint);
    CHECK(handler.last_ended() == 2);
    const std::size_t actions_before = h.log.size();
    // After 2 ended, barriers and markers of 1 and 2 are obsolete: ignored, no I/O.
    barrier(gate, 0, 1, priority), barrier(gate, 1, 2, priority), marker(gate, 2, 2), marker(gate, 0, 1);
    for (int i = 0; i < 4; ++i) CHECK(take_one(gate, handler).empty());
    CHECK(h.log.size() == actions_before);
    if (mode == checkpoint_mode::unaligned) {
      CHECK(h.captured(2, 1) == strings{"1a"});
      CHECK(h.captured(2, 2) == strings{"2a"});
    } else {
      CHECK(h.captured_channels() == 0);
    }
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  co_return;
}

// Three phases, each with obsolete barriers of another kind:
// 1. 6 subsumes 5: the obsolete 5s (at or below the last ended id) arrive on channels 1 (in-band)
//    and 2 (priority) while 6 is pending;
// 2. 8 starts while 7 never did here: the obsolete 7s (above the last ended id, below the pending
//    one) and a marker 7 arrive while 8 is pending;
// 3. the coordinator aborts 9 before any barrier 9 arrives: they come with nothing pending.
// Each priority barrier has data delivered behind it before the task takes it: sent after the
// barrier, it is not channel state.
task<void> scenario_10_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::unaligned});
    harness h(gate, handler);
    // --- phase 1 ---
    put(gate, 1, "1a"), put(gate, 1, "1b");
    barrier(gate, 0, 5, true);
    REQUIRE(h.step());  // snapshot 5
    REQUIRE(h.step());  // 1a, captured for 5
    CHECK(h.captured(5, 1) == strings{"1a"});
    put(gate, 0, "0a");
    barrier(gate, 0, 6, true);  // 6 overtakes 0a on channel 0; 5 is subsumed
    put(gate, 0, "0b");         // sent after 6
    REQUIRE(h.step());
    CHECK(h.aborts.size() == 1);
    CHECK(h.aborts[0].id == 5);
    CHECK(h.aborts[0].reason == abort_reason::subsumed);
    CHECK(h.triggers.back().id == 6);
    CHECK(h.captured(6, 0) == strings{"0a"});
    // Channel 1 still holds 1b, then its obsolete in-band barrier 5, then more in-flight data and 6.
    barrier(gate, 1, 5, false), put(gate, 1, "1c"), put(gate, 1, "1d"), barrier(gate, 1, 6, false),
        put(gate, 1, "1e");
    // Channel 2: an obsolete PRIORITY barrier 5 must not capture its queue nor stop its capture.
    put(gate, 2, "2a"), barrier(gate, 2, 5, true), put(gate, 2, "2b");
    h.drain();
    CHECK(handler.is_capturing(2));
    CHECK(handler.pending() == 6);
    put(gate, 2, "2c"), barrier(gate, 2, 6, false), put(gate, 2, "2d");
    h.drain();
    CHECK(h.captured(6, 0) == strings{"0a"});
    CHECK(h.captured(6, 1) == strings{"1b", "1c", "1d"});
    CHECK(h.captured(6, 2) == strings{"2a", "2b", "2c"});
    CHECK(h.finished == std::vector<std::uint64_t>{6});
    CHECK(h.aborts.size() == 1);
    CHECK(h.processed.size() == 11);
    h.complete_writes();

    // --- phase 2 ---
    put(gate, 1, "1f"), put(gate, 2, "2e");
    barrier(gate, 0, 8, true);  // channel 0 skipped 7
    put(gate, 0, "0c");
    REQUIRE(h.step());
    CHECK(h.triggers.back().id == 8);
    CHECK(h.captured(8, 0).empty());  // 8 overtook nothing on channel 0
    // Channel 1: data, an obsolete in-band 7, data, then 8. Channel 2: an obsolete priority 7 over
    // 2e and a marker 7, then data and 8.
    barrier(gate, 1, 7, false), put(gate, 1, "1g"), barrier(gate, 1, 8, false), put(gate, 1, "1h");
    barrier(gate, 2, 7, true), marker(gate, 2, 7), put(gate, 2, "2f");
    h.drain();
    CHECK(handler.pending() == 8);
    CHECK(handler.is_capturing(2));
    CHECK_FALSE(handler.is_capturing(1));
    put(gate, 2, "2g"), barrier(gate, 2, 8, true), put(gate, 2, "2h");  // 8 overtakes 2g
    h.drain();
    CHECK(h.captured(8, 0).empty());
    CHECK(h.captured(8, 1) == strings{"1f", "1g"});
    CHECK(h.captured(8, 2) == strings{"2e", "2f", "2g"});
    CHECK(h.captured(7, 1).empty());
    CHECK(h.captured(7, 2).empty());
    CHECK(h.finished == std::vector<std::uint64_t>{6, 8});
    CHECK(h.aborts.size() == 1);  // neither the 7s nor the marker ended anything
    h.complete_writes();

    // --- phase 3 ---
    h.apply(handler.abort(9, abort_reason::expired, "coordinator timeout"));
    REQUIRE(h.aborts.size() == 2);
    CHECK(h.aborts[1].id == 9);
    const std::size_t triggers = h.triggers.size();
    put(gate, 1, "1i");
    barrier(gate, 0, 9, true), put(gate, 0, "0d"), barrier(gate, 1, 9, false), barrier(gate, 2, 9, true);
    h.drain();
    CHECK(h.triggers.size() == triggers);  // no snapshot for the aborted 9
    CHECK(handler.pending() == no_checkpoint);
    for (std::uint32_t c = 0; c < 3; ++c) CHECK_FALSE(handler.is_capturing(c));
    CHECK(h.captured(9, 0).empty());
    CHECK(h.captured(9, 1).empty());
    put(gate, 0, "0e"), barrier(gate, 0, 10, true), put(gate, 1, "1j"), barrier(gate, 1, 10, false);
    put(gate, 2, "2i"), barrier(gate, 2, 10, false);
    h.drain();
    CHECK(h.finished == std::vector<std::uint64_t>{6, 8, 10});
    CHECK(h.captured(10, 0) == strings{"0e"});
    CHECK(h.captured(10, 1) == strings{"1j"});
    CHECK(h.captured(10, 2) == strings{"2i"});
    CHECK(h.aborts.size() == 2);
    CHECK(h.processed.size() == 24);
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  co_return;
}

task<void> scenario_11_body(network_memory* memory, checkpoint_mode mode) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = mode});
    harness h(gate, handler);
    const bool priority = mode == checkpoint_mode::unaligned;
    CHECK(handler.set_replaying(true).empty());
    put(gate, 1, "recovered");
    barrier(gate, 0, 3, priority);
    h.drain();
    REQUIRE(h.aborts.size() == 1);
    CHECK(h.aborts[0].id == 3);
    CHECK(h.aborts[0].reason == abort_reason::not_ready);
    CHECK(h.aborts[0].detail == "not ready: replaying recovered channel state");
    CHECK(h.triggers.empty());
    CHECK(h.captured_channels() == 0);
    CHECK_FALSE(gate.blocked(0));
    // The declined checkpoint's other barriers are ignored.
    barrier(gate, 1, 3, priority), barrier(gate, 2, 3, priority);
    h.drain();
    CHECK(h.aborts.size() == 1);
    CHECK(handler.set_replaying(false).empty());
    // Replay done: the next checkpoint proceeds; turning replay on again aborts it not_ready.
    barrier(gate, 0, 4, priority);
    h.drain();
    CHECK(handler.pending() == 4);
    h.apply(handler.set_replaying(true));
    REQUIRE(h.aborts.size() == 2);
    CHECK(h.aborts[1].id == 4);
    CHECK(h.aborts[1].reason == abort_reason::not_ready);
    CHECK_FALSE(gate.blocked(0));
    h.apply(handler.set_replaying(false));
    for (std::uint32_t c = 0; c < 3; ++c) barrier(gate, c, 5, priority);
    h.drain();
    CHECK(h.triggers.back().id == 5);
    CHECK(handler.last_ended() == 5);
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

// No data that follows a channel's barrier reaches the task before that checkpoint's snapshot.
task<void> scenario_12_body(network_memory* memory, checkpoint_mode mode) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = mode, .alignment_timeout = 10ms});
    harness h(gate, handler);
    const bool priority = mode == checkpoint_mode::unaligned;
    for (std::uint32_t c = 0; c < 2; ++c) {
      put(gate, c, "pre"), barrier(gate, c, 1, priority);
      for (int i = 0; i < 4; ++i) put(gate, c, "post");
    }
    put(gate, 2, "pre");
    h.drain();
    co_await sleep_for(5ms);
    h.drain();
    barrier(gate, 2, 1, priority), put(gate, 2, "post");
    h.drain();
    REQUIRE(h.triggers.size() == 1);
    const auto trigger = std::find(h.log.begin(), h.log.end(), "trigger 1 " + std::string(to_string(h.triggers[0].mode)));
    REQUIRE(trigger != h.log.end());
    int pre = 0, post = 0;
    for (auto it = h.log.begin(); it != h.log.end(); ++it) {
      if (it->starts_with("data") && it->ends_with(" post")) {
        CHECK(it > trigger);
        ++post;
      }
      if (it->starts_with("data") && it->ends_with(" pre") && mode != checkpoint_mode::unaligned) {
        CHECK(it < trigger);
        ++pre;
      }
    }
    CHECK(post == 9);
    if (mode != checkpoint_mode::unaligned) CHECK(pre == 3);
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
}

// Aligned checkpoints (and savepoints, which are aligned) never open a channel-state write.
task<void> scenario_13_body(network_memory* memory, checkpoint_mode mode, std::uint32_t seed) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = mode});
    harness h(gate, handler);
    std::mt19937 rng(seed);
    std::uint64_t next_id[3] = {1, 1, 1};
    for (int round = 0; round < 300; ++round) {
      const std::uint32_t c = rng() % 3;
      switch (rng() % 4) {
        case 0:
          if (gate.queued(c) < 5) put(gate, c, "d");
          break;
        case 1: barrier(gate, c, next_id[c]++, false); break;
        case 2: next_id[c] += rng() % 10 == 0 ? 1 : 0; break;  // now and then the upstream skips an id
        default: h.step(); break;
      }
      CHECK_FALSE(handler.is_capturing(c));
    }
    const std::uint64_t last = *std::max_element(std::begin(next_id), std::end(next_id));
    for (std::uint32_t c = 0; c < 3; ++c) barrier(gate, c, last, false);
    h.drain();
    REQUIRE_FALSE(h.triggers.empty());
    CHECK(h.triggers.back().id == last);
    for (const trigger_snapshot& t : h.triggers) CHECK(t.mode != checkpoint_mode::unaligned);
    CHECK(h.finished.empty());
    CHECK(h.captured_channels() == 0);
    CHECK(h.writer_views.empty());
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

// Bounded bookkeeping: 10,000 ids pass through, many obsolete, many subsumed or cancelled, some
// completing. And no flag of an ended checkpoint leaks into the next one: the per-channel state
// the handler shows (blocked while aligning, capturing while capturing) matches the barriers of the
// pending id the task took, and a checkpoint completes only once every channel delivered its barrier.
task<void> scenario_14_body(network_memory* memory, checkpoint_mode mode) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = mode, .alignment_timeout = 1ms});
    harness h(gate, handler);
    const std::size_t bookkeeping = handler.bookkeeping_bytes();
    const bool priority = mode == checkpoint_mode::unaligned || mode == checkpoint_mode::aligned_timeout;
    std::map<std::uint64_t, unsigned> taken;  // id -> the channels whose barrier `id` the task took
    std::size_t triggers_checked = 0, finishes_checked = 0, completed = 0;
    const auto check_completed = [&](std::uint64_t id) {
      INFO("checkpoint " << id << " completed with the barriers of channels " << taken[id]);
      REQUIRE(taken[id] == 0b111u);
      ++completed;
    };
    const auto take_all = [&] {
      while (std::optional<gate_item> item = gate.try_next()) {
        if (item->is_event() && item->event->kind == gate_event::type::barrier) {
          taken[item->event->id] |= 1u << item->channel;
        }
        h.handle(*item);
      }
      for (; triggers_checked < h.triggers.size(); ++triggers_checked) {
        const trigger_snapshot& t = h.triggers[triggers_checked];
        if (t.mode != checkpoint_mode::unaligned) check_completed(t.id);
      }
      for (; finishes_checked < h.finished.size(); ++finishes_checked) check_completed(h.finished[finishes_checked]);
      const checkpoint_id p = handler.pending();
      for (std::uint32_t c = 0; c < 3; ++c) {
        const bool delivered = p != no_checkpoint && (taken[p] >> c & 1u) != 0;
        INFO("pending " << p << " channel " << c << " delivered its barrier: " << delivered);
        REQUIRE(gate.blocked(c) == (handler.aligning() && delivered));
        REQUIRE(handler.is_capturing(c) == (handler.capturing() && !delivered));
      }
    };
    std::mt19937 rng(14);
    for (std::uint64_t id = 1; id <= 10'000; ++id) {
      const std::uint32_t c = rng() % 3;
      if (rng() % 2 == 0) {
        gate.take_credit_announcements();
        if (gate.announced_unused(c) > 0) put(gate, c, "d");
      }
      const std::uint64_t sent = rng() % 4 == 0 && id > 3 ? id - rng() % 3 : id;  // sometimes obsolete
      if (rng() % 7 == 0) {
        marker(gate, c, sent);
      } else {
        barrier(gate, c, sent, priority && rng() % 2 == 0);
      }
      // The other channels' barriers of `id`: all of them now and then, so checkpoints complete.
      const bool all = rng() % 3 == 0;
      for (std::uint32_t other = 1; other < 3; ++other) {
        if (all || rng() % 3 == 0) barrier(gate, (c + other) % 3, id, false);
      }
      if (rng() % 50 == 0) h.apply(handler.abort(id, abort_reason::coordinator, "declined elsewhere"));
      take_all();
      h.complete_writes();
      if (rng() % 5 == 0) {
        co_await sleep_for(1ms);
        h.apply(handler.on_timer());
        take_all();
      }
      CHECK(handler.tracked_checkpoints() <= 1);
      CHECK(handler.bookkeeping_bytes() == bookkeeping);
      CHECK(pool.in_use() == gate.segments_held());  // no view outlives its write
    }
    CHECK(completed > 200);
    for (std::uint32_t c = 0; c < 3; ++c) gate.deliver_end_of_partition(c);
    h.drain();
    CHECK(handler.tracked_checkpoints() == 0);
    CHECK_FALSE(h.triggers.empty());
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
}

}  // namespace

TEST_CASE("scenario 5: a barrier for N after N+1 started is ignored, with no action and no I/O", "[barrier][scenario]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::at_least_once);
  sync_wait(scenario_5_body(&memory, mode), virtual_time());
}

TEST_CASE("scenario 10: an obsolete barrier on one channel and a newer one on another capture exactly the "
          "buffers between the snapshot and each channel's barrier",
          "[barrier][scenario]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(scenario_10_body(&memory), virtual_time());
}

TEST_CASE("scenario 11: a barrier while recovered channel state is replayed is declined not ready",
          "[barrier][scenario]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::at_least_once);
  sync_wait(scenario_11_body(&memory, mode), virtual_time());
}

TEST_CASE("scenario 12: no record after a channel's barrier is processed before the snapshot", "[barrier][scenario]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::aligned_timeout, checkpoint_mode::unaligned);
  sync_wait(scenario_12_body(&memory, mode), virtual_time());
}

TEST_CASE("scenario 13: aligned and at-least-once checkpoints never open a channel-state write", "[barrier][scenario]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::at_least_once);
  const auto seed = GENERATE(1u, 2u, 3u, 4u);
  sync_wait(scenario_13_body(&memory, mode, seed), virtual_time());
}

TEST_CASE("scenario 14: the handler's bookkeeping stays bounded over 10,000 checkpoint ids", "[barrier][scenario]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout,
                             checkpoint_mode::at_least_once);
  sync_wait(scenario_14_body(&memory, mode), virtual_time());
}
