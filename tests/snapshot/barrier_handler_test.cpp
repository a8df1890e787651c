// The barrier handler's four modes over a real input gate, driven like a task's mailbox loop: which
// items the task processes when, which snapshot it triggers, and which buffers become channel state.
#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/snapshot/barrier_handler.hpp>

#include <snapshot/barrier_harness.hpp>
#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
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

std::ptrdiff_t position(const strings& log, const std::string& line) {
  auto it = std::find(log.begin(), log.end(), line);
  REQUIRE(it != log.end());
  return it - log.begin();
}

task<void> aligned_three_channels_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::aligned});
    harness h(gate, handler);

    put(gate, 0, "a0"), barrier(gate, 0, 1, false), put(gate, 0, "a1");
    h.drain();
    CHECK(gate.blocked(0));
    CHECK(handler.aligning());
    CHECK(h.triggers.empty());
    co_await sleep_for(5ms);

    put(gate, 1, "b0"), barrier(gate, 1, 1, false), put(gate, 1, "b1");
    h.drain();
    CHECK(gate.blocked(0));
    CHECK(gate.blocked(1));
    CHECK(h.triggers.empty());
    co_await sleep_for(5ms);

    put(gate, 2, "c0"), put(gate, 2, "c1"), barrier(gate, 2, 1, false), put(gate, 2, "c2");
    h.drain();
    REQUIRE(h.triggers.size() == 1);
    CHECK(h.triggers[0].id == 1);
    CHECK(h.triggers[0].mode == checkpoint_mode::aligned);
    CHECK_FALSE(gate.blocked(0));
    CHECK_FALSE(gate.blocked(1));
    CHECK_FALSE(handler.aligning());
    CHECK(handler.last_ended() == 1);
    // Every record before a barrier is processed before the snapshot, every one after it, after.
    const auto trigger = position(h.log, "trigger 1 aligned");
    for (const char* before : {"data 0 a0", "data 1 b0", "data 2 c0", "data 2 c1"}) CHECK(position(h.log, before) < trigger);
    for (const char* after : {"data 0 a1", "data 1 b1", "data 2 c2"}) CHECK(position(h.log, after) > trigger);
    CHECK(h.processed.size() == 7);
    CHECK(h.captured_channels() == 0);
    REQUIRE(handler.last_stats());
    CHECK(handler.last_stats()->id == 1);
    CHECK(handler.last_stats()->alignment_duration() == 10ms);
    CHECK(handler.last_stats()->captured_bytes == 0);
  }
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  co_return;
}

// Flink's UnalignedCheckpointsTest style: exactly which buffers were captured, per channel, in order.
// Data that arrives behind a priority barrier before the task takes it was sent after the barrier:
// it is not in-flight data of the checkpoint.
task<void> overtaken_only_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::unaligned});
    harness h(gate, handler);
    put(gate, 0, "0a"), put(gate, 0, "0b");
    barrier(gate, 0, 1, true);  // overtakes 0a 0b
    put(gate, 0, "0c");         // sent after the barrier, delivered before the task takes it
    REQUIRE(h.step());
    CHECK(h.captured(1, 0) == strings{"0a", "0b"});
    h.drain();
    CHECK(h.captured(1, 0) == strings{"0a", "0b"});
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> unaligned_exact_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::unaligned});
    harness h(gate, handler);

    put(gate, 0, "0a"), put(gate, 0, "0b");
    put(gate, 1, "1a"), put(gate, 1, "1b");
    put(gate, 2, "2a");
    barrier(gate, 0, 1, true);  // overtakes 0a 0b
    REQUIRE(h.step());          // priority first: the snapshot is taken at once
    CHECK(h.log == strings{"trigger 1 unaligned", "capture 1 0: 0a 0b", "barrier 0 1"});
    CHECK(handler.is_capturing(1));
    CHECK(handler.is_capturing(2));
    CHECK_FALSE(handler.is_capturing(0));
    h.drain();  // 0a 0b are processed (not captured twice); 1a 1b 2a are captured as they are taken

    put(gate, 1, "1c"), barrier(gate, 1, 1, false), put(gate, 1, "1d");  // in-band: overtakes nothing
    put(gate, 2, "2b"), barrier(gate, 2, 1, true);                         // priority: overtakes 2b
    put(gate, 0, "0c");
    h.drain();

    CHECK(h.captured(1, 0) == strings{"0a", "0b"});
    CHECK(h.captured(1, 1) == strings{"1a", "1b", "1c"});
    CHECK(h.captured(1, 2) == strings{"2a", "2b"});
    CHECK(h.finished == std::vector<std::uint64_t>{1});
    CHECK(position(h.log, "finish 1") > position(h.log, "capture 1 1: 1c"));
    // The task still processes every buffer exactly once.
    CHECK(h.processed.size() == 9);
    REQUIRE(handler.last_stats());
    CHECK(handler.last_stats()->mode == checkpoint_mode::unaligned);
    CHECK(handler.last_stats()->captured_buffers == 7);
    CHECK(handler.last_stats()->captured_bytes == 14);
    CHECK_FALSE(handler.capturing());
    // The writer's views keep the captured bytes intact; when the writes are done the credit is back.
    CHECK(gate.view_held(1) > 0);
    h.complete_writes();
    gate.take_credit_announcements();
    CHECK(gate.view_held(0) + gate.view_held(1) + gate.view_held(2) == 0);
    CHECK(gate.check_credit_accounting().empty());
  }
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  co_return;
}

task<void> timeout_switch_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::aligned_timeout, .alignment_timeout = 10ms});
    harness h(gate, handler);
    CHECK_FALSE(handler.deadline());

    put(gate, 0, "0a"), barrier(gate, 0, 1, false), put(gate, 0, "0b");  // 0b is after the barrier
    put(gate, 1, "1a"), put(gate, 1, "1b");
    const auto start = executor::current()->now();
    h.drain();
    REQUIRE(handler.deadline());
    CHECK(*handler.deadline() == start + 10ms);
    CHECK(gate.blocked(0));
    co_await sleep_for(4ms);
    h.apply(handler.on_timer());  // not yet
    CHECK(handler.aligning());
    co_await sleep_for(11ms);
    h.apply(handler.on_timer());
    REQUIRE(h.triggers.size() == 1);
    CHECK(h.triggers[0].mode == checkpoint_mode::unaligned);
    CHECK_FALSE(gate.blocked(0));
    CHECK_FALSE(handler.deadline());
    CHECK_FALSE(handler.is_capturing(0));  // its barrier is in: 0b is post-barrier data
    CHECK(handler.is_capturing(1));
    CHECK(handler.is_capturing(2));

    put(gate, 1, "1c"), barrier(gate, 1, 1, false), put(gate, 1, "1d");  // still in-band upstream
    put(gate, 2, "2a"), barrier(gate, 2, 1, true);                         // converted to priority
    h.drain();
    CHECK(h.captured(1, 0).empty());
    CHECK(h.captured(1, 1) == strings{"1c"});
    CHECK(h.captured(1, 2) == strings{"2a"});
    CHECK(h.finished == std::vector<std::uint64_t>{1});
    CHECK(position(h.log, "data 0 0b") > position(h.log, "trigger 1 unaligned"));
    REQUIRE(handler.last_stats());
    CHECK(handler.last_stats()->timed_out);
    CHECK(handler.last_stats()->mode == checkpoint_mode::unaligned);
    CHECK(handler.last_stats()->alignment_duration() == 15ms);
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  co_return;
}

task<void> timeout_not_reached_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::aligned_timeout, .alignment_timeout = 10ms});
    harness h(gate, handler);
    for (std::uint32_t c = 0; c < 3; ++c) put(gate, c, "x"), barrier(gate, c, 1, false);
    h.drain();
    co_await sleep_for(20ms);
    h.apply(handler.on_timer());
    REQUIRE(h.triggers.size() == 1);
    // Aligned, said as aligned_timeout: the task's own barrier may still switch downstream.
    CHECK(h.triggers[0].mode == checkpoint_mode::aligned_timeout);
    CHECK(h.captured_channels() == 0);
    CHECK_FALSE(handler.last_stats()->timed_out);

    // A priority barrier means the upstream switched: this checkpoint goes unaligned at once.
    barrier(gate, 0, 2, false), put(gate, 0, "after");
    h.drain();
    CHECK(gate.blocked(0));
    put(gate, 1, "in-flight"), barrier(gate, 1, 2, true);
    h.drain();
    CHECK(h.triggers.back().id == 2);
    CHECK(h.triggers.back().mode == checkpoint_mode::unaligned);
    CHECK(h.captured(2, 1) == strings{"in-flight"});
    CHECK(h.captured(2, 0).empty());
    CHECK_FALSE(gate.blocked(0));
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> zero_timeout_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::aligned_timeout, .alignment_timeout = 0ms});
    harness h(gate, handler);
    barrier(gate, 0, 1, false), put(gate, 0, "after");
    put(gate, 1, "1a");
    REQUIRE(h.step());  // the in-band barrier: unaligned at once, nothing blocked
    CHECK(h.log == strings{"trigger 1 unaligned", "barrier 0 1"});
    CHECK_FALSE(gate.blocked(0));
    CHECK_FALSE(handler.deadline());
    h.drain();
    for (std::uint32_t c = 1; c < 3; ++c) barrier(gate, c, 1, false);
    h.drain();
    CHECK(h.captured(1, 0).empty());
    CHECK(h.captured(1, 1) == strings{"1a"});
    CHECK(h.finished == std::vector<std::uint64_t>{1});
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> at_least_once_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::at_least_once});
    harness h(gate, handler);
    put(gate, 0, "0a"), barrier(gate, 0, 1, false), put(gate, 0, "0b");
    put(gate, 1, "1a"), barrier(gate, 1, 1, true), put(gate, 1, "1b");
    h.drain();
    CHECK(h.triggers.empty());
    for (std::uint32_t c = 0; c < 3; ++c) CHECK_FALSE(gate.blocked(c));
    CHECK(h.processed.size() == 4);  // nothing held back
    barrier(gate, 2, 1, false);
    h.drain();
    REQUIRE(h.triggers.size() == 1);
    CHECK(h.triggers[0].mode == checkpoint_mode::at_least_once);
    CHECK(h.captured_channels() == 0);
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> marker_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::aligned});
    harness h(gate, handler);
    barrier(gate, 0, 1, false), put(gate, 0, "after");
    h.drain();
    CHECK(gate.blocked(0));
    marker(gate, 1, 1);
    h.drain();
    REQUIRE(h.aborts.size() == 1);
    CHECK(h.aborts[0].id == 1);
    CHECK(h.aborts[0].reason == abort_reason::cancelled_by_barrier);
    CHECK(h.aborts[0].detail == "cancellation marker on channel 1");
    CHECK_FALSE(gate.blocked(0));
    CHECK(h.log.back() == "data 0 after");
    // The cancelled checkpoint's later barriers are ignored; the next one aligns.
    barrier(gate, 1, 1, false), barrier(gate, 2, 1, false);
    h.drain();
    CHECK(h.triggers.empty());
    CHECK(handler.pending() == no_checkpoint);
    for (std::uint32_t c = 0; c < 3; ++c) barrier(gate, c, 2, false);
    h.drain();
    REQUIRE(h.triggers.size() == 1);
    CHECK(h.triggers[0].id == 2);
    // A marker for a newer id aborts the pending one as subsumed, and that id with it.
    barrier(gate, 0, 3, false);
    h.drain();
    marker(gate, 2, 4);
    h.drain();
    REQUIRE(h.aborts.size() == 3);
    CHECK(h.aborts[1].id == 3);
    CHECK(h.aborts[1].reason == abort_reason::subsumed);
    CHECK(h.aborts[2].id == 4);
    CHECK(h.aborts[2].reason == abort_reason::cancelled_by_barrier);
    CHECK_FALSE(gate.blocked(0));
    CHECK(handler.last_ended() == 4);
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> end_of_partition_body(network_memory* memory, checkpoint_mode mode) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = mode});
    harness h(gate, handler);
    barrier(gate, 0, 1, mode == checkpoint_mode::unaligned), barrier(gate, 1, 1, false);
    h.drain();
    CHECK(h.finished.empty());
    put(gate, 2, "last"), gate.deliver_end_of_partition(2);
    h.drain();
    if (mode == checkpoint_mode::aligned) {
      REQUIRE(h.triggers.size() == 1);
      CHECK(position(h.log, "trigger 1 aligned") > position(h.log, "data 2 last"));
    } else {
      CHECK(h.captured(1, 2) == strings{"last"});
      CHECK(h.finished == std::vector<std::uint64_t>{1});
    }
    CHECK(handler.pending() == no_checkpoint);
    // An ended channel never counts again.
    barrier(gate, 0, 2, false), barrier(gate, 1, 2, false);
    h.drain();
    CHECK(h.triggers.back().id == 2);
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> failed_channel_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::aligned});
    harness h(gate, handler);
    barrier(gate, 0, 1, false), barrier(gate, 1, 1, false);
    h.drain();
    gate.fail_channel(2, "connection to 10.0.0.2:7000 lost: Connection reset by peer");
    h.drain();
    REQUIRE(h.aborts.size() == 1);
    CHECK(h.aborts[0].reason == abort_reason::declined);
    CHECK(h.aborts[0].detail ==
          "input channel 2 failed before its barrier: connection to 10.0.0.2:7000 lost: Connection reset by peer");
    CHECK_FALSE(gate.blocked(0));
    barrier(gate, 0, 2, false), barrier(gate, 1, 2, false);
    h.drain();
    CHECK(h.triggers.size() == 1);
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> aligned_declines_priority_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate gate(pool, three_channels);
    barrier_handler handler(gate, {.mode = checkpoint_mode::aligned});
    harness h(gate, handler);
    put(gate, 0, "pre"), barrier(gate, 0, 1, true);
    h.drain();
    REQUIRE(h.aborts.size() == 1);
    CHECK(h.aborts[0].reason == abort_reason::declined);
    CHECK(h.aborts[0].detail == "unaligned (priority) barrier on channel 0 but this task checkpoints aligned");
    CHECK(h.captured_channels() == 0);
    CHECK_FALSE(gate.blocked(0));
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

task<void> two_gates_body(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 18, 18);
  {
    input_gate left(pool, {.channels = 2, .exclusive_per_channel = 4, .floating = 0});
    input_gate right(pool, {.channels = 1, .exclusive_per_channel = 4, .floating = 0});
    barrier_handler handler({&left, &right}, {.mode = checkpoint_mode::unaligned});
    harness h({&left, &right}, handler);
    CHECK(handler.channels() == 3);
    put(right, 0, "r0"), put(left, 1, "l1");
    barrier(left, 0, 7, true);
    h.drain(0);
    CHECK(handler.is_capturing(0, 1));
    CHECK(handler.is_capturing(1, 0));
    h.drain(1);
    barrier(right, 0, 7, false);
    h.drain(1);
    CHECK(h.finished.empty());
    barrier(left, 1, 7, true);
    h.drain(0);
    CHECK(h.captured(7, 1, 0) == strings{"l1"});
    CHECK(h.captured(7, 0, 1) == strings{"r0"});
    CHECK(h.captured(7, 0, 0).empty());
    CHECK(h.finished == std::vector<std::uint64_t>{7});
    h.complete_writes();
  }
  CHECK(pool.in_use() == 0);
  co_return;
}

}  // namespace

TEST_CASE("aligned: each channel blocks at its barrier and the snapshot comes after the last of 3", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(aligned_three_channels_body(&memory), virtual_time());
}

TEST_CASE("unaligned: the channel state is exactly the in-flight buffers, per channel, in order", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(unaligned_exact_body(&memory), virtual_time());
}

TEST_CASE("unaligned: a priority barrier captures only the data it overtook, not data delivered behind it",
          "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(overtaken_only_body(&memory), virtual_time());
}

TEST_CASE("aligned_timeout: an alignment past the timeout switches to unaligned", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(timeout_switch_body(&memory), virtual_time());
}

TEST_CASE("aligned_timeout: stays aligned within the timeout, switches on a priority barrier", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(timeout_not_reached_body(&memory), virtual_time());
}

TEST_CASE("aligned_timeout with a zero timeout is unaligned from the first barrier", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(zero_timeout_body(&memory), virtual_time());
}

TEST_CASE("at-least-once never blocks and triggers once every channel's barrier is in", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(at_least_once_body(&memory), virtual_time());
}

TEST_CASE("a cancellation marker aborts the checkpoint, unblocks, and its later barriers are ignored", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(marker_body(&memory), virtual_time());
}

TEST_CASE("end-of-partition during alignment: the ended channel no longer counts", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  sync_wait(end_of_partition_body(&memory, mode), virtual_time());
}

TEST_CASE("a channel failing before its barrier declines the pending checkpoint", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(failed_channel_body(&memory), virtual_time());
}

TEST_CASE("aligned: a priority barrier is declined, never captured", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(aligned_declines_priority_body(&memory), virtual_time());
}

TEST_CASE("a two-input task: one handler over two gates captures each gate's channels", "[barrier]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(two_gates_body(&memory), virtual_time());
}
