// task_checkpoint's work beside the task (task_checkpoint.hpp): an operator's deferred state written
// in slices after the barrier, and what happens when that work, or a checkpoint's watcher, throws.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/snapshot/state_file_reader.hpp>
#include <sluice/snapshot/task_checkpoint.hpp>

#include <snapshot/task_checkpoint_support.hpp>
#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::snapshot;
using namespace std::chrono_literals;
namespace bf = sluice::buffers;
using runtime::sync_wait;
using runtime::task;
using test::temp_dir;
using test::checkpoint_fakes::bytes_of;
using test::checkpoint_fakes::chk_dir;
using test::checkpoint_fakes::poll_all;
using test::checkpoint_fakes::segment_bytes;
using test::checkpoint_fakes::state_path;
using test::checkpoint_fakes::task_harness;
using test::checkpoint_fakes::test_task;

namespace {

struct deferred_seen {
  int slices_at_barrier = -1;
  std::string items0;
  bool completed = false;
  std::size_t acks = 99;
  std::size_t failures = 99;
  std::optional<task_state> state;
};

const std::vector<std::vector<std::byte>> slices = {bytes_of("one;"), bytes_of("two;"), bytes_of("three;")};

task<void> deferred_case(std::string chk, checkpoint_mode mode, deferred_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  {
    task_harness h(memory, /*has_input=*/false);
    h.subject.operators = {{0, bytes_of("head;")}, {1, bytes_of("plain")}};
    h.subject.deferred = {{0, slices}};
    io::result<void> taken = co_await h.checkpoint.take(4, mode, chk);
    REQUIRE(taken.ok());
    // The barrier is out; the slices come after it, between the task's own turns.
    seen->slices_at_barrier = h.subject.slices_given;
    seen->items0 = poll_all(h.out, 0, 4, nullptr);
    const checkpoint_outcome outcome = co_await h.checkpoint.writer().result(4);
    seen->completed = outcome.completed();
    co_await runtime::sleep_for(1ms);  // the watcher reports
    seen->acks = h.acknowledger.acks.size();
    seen->failures = h.subject.failures.size();
    co_await h.checkpoint.close();
  }
  io::result<task_state> state = co_await read_state_file(state_path(chk), "chk-4/task-6.state",
                                                          {.checkpoint = 4, .task = test_task});
  REQUIRE(state.ok());
  seen->state = std::move(state).value();
}

}  // namespace

TEST_CASE("a snapshot's deferred state follows its operator's bytes in slices written after the barrier",
          "[task_checkpoint]") {
  for (const checkpoint_mode mode : {checkpoint_mode::aligned, checkpoint_mode::unaligned}) {
    INFO(to_string(mode));
    temp_dir dir;
    deferred_seen seen;
    sync_wait(deferred_case(chk_dir(dir, 4), mode, &seen), test::virtual_time());
    CHECK(seen.slices_at_barrier < 3);
    CHECK(seen.items0.find_first_of("bB") != std::string::npos);
    CHECK(seen.completed);
    CHECK(seen.acks == 1);
    CHECK(seen.failures == 0);
    REQUIRE(seen.state.has_value());
    CHECK(seen.state->operator_state.at(0) == bytes_of("head;one;two;three;"));
    CHECK(seen.state->operator_state.at(1) == bytes_of("plain"));
  }
}

namespace {

struct failure_seen {
  std::optional<checkpoint_outcome> first;
  std::vector<std::string> failures;
  std::vector<checkpoint_id> acked;
  bool closed = false;
};

// Checkpoint 5 fails beside the task (its deferred state throws at the second slice, or acknowledging
// it throws); checkpoint 6 follows.
task<void> failure_case(std::string dir5, std::string dir6, bool slice_throws, failure_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/false);
  h.subject.operators = {{0, bytes_of("head;")}};
  if (slice_throws) {
    h.subject.deferred = {{0, slices}};
    h.subject.deferred_throw_at = 1;
  } else {
    h.acknowledger.throw_on_ack = 5;
  }
  io::result<void> taken = co_await h.checkpoint.take(5, checkpoint_mode::aligned, dir5);
  REQUIRE(taken.ok());
  seen->first = co_await h.checkpoint.writer().result(5);
  co_await runtime::sleep_for(1ms);
  for (const io::error& e : h.subject.failures) seen->failures.push_back(e.message());
  h.subject.deferred_throw_at = -1;
  io::result<void> next = co_await h.checkpoint.take(6, checkpoint_mode::aligned, dir6);
  REQUIRE(next.ok());
  const checkpoint_outcome second = co_await h.checkpoint.writer().result(6);
  REQUIRE(second.completed());
  co_await runtime::sleep_for(1ms);
  for (const auto& a : h.acknowledger.acks) seen->acked.push_back(a.id);
  co_await h.checkpoint.close();  // nothing left to rethrow
  seen->closed = true;
}

}  // namespace

TEST_CASE("a deferred state that throws aborts its checkpoint and fails the task at once", "[task_checkpoint]") {
  temp_dir dir;
  failure_seen seen;
  sync_wait(failure_case(chk_dir(dir, 5), chk_dir(dir, 6), true, &seen), test::virtual_time());
  REQUIRE(seen.first.has_value());
  CHECK(!seen.first->completed());
  CHECK(seen.first->reason == abort_reason::io_error);
  REQUIRE(seen.failures.size() == 1);
  CHECK(seen.failures[0] == "task count#6: checkpoint 5: the operators' state: slice failed");
  CHECK(seen.acked == std::vector<checkpoint_id>{6});
  CHECK(seen.closed);
}

// Left to the scope of watchers, the exception waited for the close and stopped the other watchers
// meanwhile: checkpoint 6 was never acknowledged, and a task waiting for its final checkpoint waited
// for ever (the planted FLINK-17869 lookup, docs/simulation.md).
TEST_CASE("a checkpoint's watcher that throws fails the task at once and a later checkpoint is still acknowledged",
          "[task_checkpoint]") {
  temp_dir dir;
  failure_seen seen;
  sync_wait(failure_case(chk_dir(dir, 5), chk_dir(dir, 6), false, &seen), test::virtual_time());
  REQUIRE(seen.first.has_value());
  CHECK(seen.first->completed());
  REQUIRE(seen.failures.size() == 1);
  CHECK(seen.failures[0] == "task count#6: checkpoint 5: its outcome: the acknowledger failed");
  CHECK(seen.acked == std::vector<checkpoint_id>{6});
  CHECK(seen.closed);
}

namespace {

struct abandoned_seen {
  int slices_before_abandon = -1;
  bool decided_before_next = true;
  std::optional<checkpoint_outcome> first;
  bool second_completed = false;
  std::vector<checkpoint_id> acked;
  std::size_t failures = 99;
};

// Checkpoint 4's deferred state is taken over by a later freeze after its first slice (its
// checkpoint is not aborted yet: an aligned snapshot's writer starts only after its output is out).
task<void> abandoned_case(std::string dir4, std::string dir5, abandoned_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/false);
  h.subject.operators = {{0, bytes_of("head;")}};
  h.subject.deferred = {{0, slices}};
  io::result<void> taken = co_await h.checkpoint.take(4, checkpoint_mode::aligned, dir4);
  REQUIRE(taken.ok());
  h.subject.deferred_abandon_at = 1;
  co_await runtime::sleep_for(1ms);  // every slice the writer would take
  seen->slices_before_abandon = h.subject.slices_given;
  // Never finished: a file that ends without the state's end must not complete.
  seen->decided_before_next = h.checkpoint.writer().try_result(4).has_value();
  h.subject.deferred_abandon_at = -1;
  io::result<void> next = co_await h.checkpoint.take(5, checkpoint_mode::aligned, dir5);
  REQUIRE(next.ok());
  seen->first = co_await h.checkpoint.writer().result(4);
  const checkpoint_outcome second = co_await h.checkpoint.writer().result(5);
  seen->second_completed = second.completed();
  co_await runtime::sleep_for(1ms);
  for (const auto& a : h.acknowledger.acks) seen->acked.push_back(a.id);
  seen->failures = h.subject.failures.size();
  co_await h.checkpoint.close();
}

}  // namespace

TEST_CASE("a deferred state taken over by a later snapshot leaves its checkpoint unfinished until the next aborts it",
          "[task_checkpoint]") {
  temp_dir dir;
  abandoned_seen seen;
  sync_wait(abandoned_case(chk_dir(dir, 4), chk_dir(dir, 5), &seen), test::virtual_time());
  CHECK(seen.slices_before_abandon == 1);
  CHECK_FALSE(seen.decided_before_next);
  REQUIRE(seen.first.has_value());
  CHECK_FALSE(seen.first->completed());
  CHECK(seen.first->reason == abort_reason::subsumed);
  CHECK(seen.second_completed);
  CHECK(seen.acked == std::vector<checkpoint_id>{5});
  CHECK(seen.failures == 0);
}
