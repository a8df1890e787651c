// task_checkpoint: a task's side of a checkpoint, driven through a fake checkpoint_subject with a
// real channel_state_writer, a real result_partition and real state files; the state file is read
// back with read_state_file and its record order with parse_state_file.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/snapshot/state_file_reader.hpp>
#include <sluice/snapshot/task_checkpoint.hpp>

#include <snapshot/task_checkpoint_support.hpp>
#include <snapshot/writer_support.hpp>
#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace sluice;
using namespace sluice::snapshot;
using namespace std::chrono_literals;
namespace bf = sluice::buffers;
using runtime::op_code;
using runtime::sync_wait;
using runtime::task;
using runtime::test_backend;
using test::captured;
using test::checkpoint_fakes::bytes_of;
using test::checkpoint_fakes::chk_dir;
using test::checkpoint_fakes::concat;
using test::checkpoint_fakes::emit_all;
using test::checkpoint_fakes::framed;
using test::checkpoint_fakes::poll_all;
using test::checkpoint_fakes::recording_acknowledger;
using test::checkpoint_fakes::segment_bytes;
using test::checkpoint_fakes::state_path;
using test::checkpoint_fakes::task_harness;
using test::checkpoint_fakes::test_task;
using test::pattern_bytes;
using test::temp_dir;

// --- unaligned ------------------------------------------------------------------------------------

namespace {

struct unaligned_seen {
  std::vector<std::pair<record_type, std::uint32_t>> order;  // every record's (type, index), in file order
  std::optional<task_state> state;
  std::string items0, items1;
  std::vector<std::byte> data0;
  std::size_t acks_before_finish_input = 99;
  bool decided_before_finish_input = true;
  std::vector<recording_acknowledger::ack> acks;
  std::size_t declines = 99;
  std::vector<checkpoint_id> sink_state_ids;
  std::uint64_t expected_channel_bytes = 0;
  std::uint64_t expected_operator_bytes = 0;
};

const std::vector<std::vector<std::byte>> sub0_records = {bytes_of("first"), pattern_bytes(segment_bytes + 50, 1),
                                                          bytes_of("third")};
const std::vector<std::vector<std::byte>> sub1_records = {pattern_bytes(300, 2)};
const std::vector<std::byte> partial0 = pattern_bytes(7, 3);     // a prefix and 3 bytes of a record
const std::vector<std::byte> rest0 = pattern_bytes(500, 4);
const std::vector<std::byte> partial2 = pattern_bytes(2, 5);     // half a length prefix
const std::vector<std::byte> rest3 = pattern_bytes(40, 6);
const std::vector<std::byte> captured0 = pattern_bytes(90, 7);  // the handler's capture, after the snapshot

task<void> unaligned_case(std::string chk, unaligned_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  {
    task_harness h(memory, /*has_input=*/true);
    h.subject.operators = {{0, bytes_of("window")}, {1, bytes_of("counts")},
                           {section_index(state_section::source), bytes_of("offset=42")}};
    h.subject.sink = true;
    h.subject.sink_bytes = bytes_of("staged lines");
    h.subject.backlog = bytes_of("backlog records");
    h.subject.input.push_back({0, partial0, captured(h.data_pool, rest0)});
    h.subject.input.push_back({2, partial2, std::nullopt});
    h.subject.input.push_back({3, {}, captured(h.data_pool, rest3)});
    seen->expected_channel_bytes = framed(sub0_records).size() + framed(sub1_records).size() + partial0.size() +
                                   rest0.size() + partial2.size() + rest3.size() + captured0.size();
    seen->expected_operator_bytes = 6 + 6 + 9 + 12 + 15;

    co_await emit_all(&h.out, sub0_records, 0);
    co_await emit_all(&h.out, sub1_records, 1);
    REQUIRE(h.out.backlog(0) >= 1);  // a full buffer is queued, the rest is in the current buffer

    io::result<void> taken = co_await h.checkpoint.take(9, checkpoint_mode::unaligned, chk);
    REQUIRE(taken.ok());
    co_await runtime::sleep_for(5ms);  // every write the writer can do is done
    seen->acks_before_finish_input = h.acknowledger.acks.size();
    seen->decided_before_finish_input = h.checkpoint.writer().try_result(9).has_value();

    std::vector<bf::buffer_view> views;
    views.push_back(captured(h.data_pool, captured0));
    h.checkpoint.capture(9, 0, std::move(views));
    h.checkpoint.finish_input(9);
    const checkpoint_outcome outcome = co_await h.checkpoint.writer().result(9);
    REQUIRE(outcome.completed());
    co_await runtime::sleep_for(1ms);  // the watcher reports
    seen->acks = h.acknowledger.acks;
    seen->declines = h.acknowledger.declines.size();
    seen->sink_state_ids = h.subject.sink_state_ids;

    // The barrier overtook the queued data, which stays queued behind it.
    seen->items0 = poll_all(h.out, 0, 9, &seen->data0);
    seen->items1 = poll_all(h.out, 1, 9, nullptr);
    co_await h.checkpoint.close();
    REQUIRE(h.data_pool.violations() == 0);
  }
  const test::read_state_file raw = test::parse_state_file(state_path(chk));
  for (const auto& r : raw.records) seen->order.emplace_back(r.header.type, r.header.index);
  io::result<task_state> state = co_await read_state_file(state_path(chk), "chk-9/task-6.state",
                                                          {.checkpoint = 9, .task = test_task});
  REQUIRE(state.ok());
  seen->state = std::move(state).value();
}

}  // namespace

TEST_CASE("an unaligned snapshot stores the overtaken output, each channel's partial record then its unread rest, "
          "then the operator, sink and backlog sections",
          "[task_checkpoint]") {
  const auto kind = GENERATE(test::backend_kind::test, test::backend_kind::uring);
  INFO("backend: " << test::to_string(kind));
  temp_dir dir;
  unaligned_seen seen;
  sync_wait(unaligned_case(chk_dir(dir, 9), &seen), test::backend_options(kind));

  REQUIRE(seen.state.has_value());
  const task_state& s = *seen.state;
  // Output channel state: exactly the subpartitions' unsent streams.
  CHECK(s.output_channels.size() == 2);
  CHECK(s.output_channels.at({0, 0}) == framed(sub0_records));
  CHECK(s.output_channels.at({0, 1}) == framed(sub1_records));
  // Input channel state per channel: the partial record, then the rest, then the handler's captures.
  CHECK(s.input_channels.size() == 3);
  CHECK(s.input_channels.at({0, 0}) == concat(concat(partial0, rest0), captured0));
  CHECK(s.input_channels.at({0, 2}) == partial2);
  CHECK(s.input_channels.at({0, 3}) == rest3);
  // The sections, under the file format's numbers.
  CHECK(s.operator_state.size() == 5);
  CHECK(s.operator_state.at(0) == bytes_of("window"));
  CHECK(s.operator_state.at(1) == bytes_of("counts"));
  CHECK(s.operator_state.at(1000) == bytes_of("offset=42"));
  CHECK(s.operator_state.at(1001) == bytes_of("staged lines"));
  CHECK(s.operator_state.at(1002) == bytes_of("backlog records"));
  CHECK(seen.sink_state_ids == std::vector<checkpoint_id>{9});

  // File order: output, input (in the subject's order), operators, sink, backlog, then the capture.
  using rt = record_type;
  std::vector<std::pair<rt, std::uint32_t>> order;
  for (const auto& o : seen.order) {
    if (order.empty() || order.back() != o) order.push_back(o);  // a channel's buffers: one entry
  }
  const std::vector<std::pair<rt, std::uint32_t>> expected_order = {
      {rt::output_channel, 0}, {rt::output_channel, 1}, {rt::input_channel, 0},      {rt::input_channel, 2},
      {rt::input_channel, 3},  {rt::operator_state, 0}, {rt::operator_state, 1},     {rt::operator_state, 1000},
      {rt::operator_state, 1001}, {rt::operator_state, 1002}, {rt::input_channel, 0}};
  CHECK(order == expected_order);

  // Not before every input channel's state is in; then once, with the writer's totals.
  CHECK(seen.acks_before_finish_input == 0);
  CHECK_FALSE(seen.decided_before_finish_input);
  REQUIRE(seen.acks.size() == 1);
  CHECK(seen.acks[0].task == test_task);
  CHECK(seen.acks[0].id == 9);
  CHECK(seen.acks[0].stats.channel_state_bytes == seen.expected_channel_bytes);
  CHECK(seen.acks[0].stats.operator_state_bytes == seen.expected_operator_bytes);
  CHECK(seen.acks[0].stats.alignment_duration == 9ms);
  CHECK(seen.declines == 0);

  // Downstream: the priority barrier first, then the data it overtook (still sent, after it).
  REQUIRE(seen.items0.size() >= 2);
  CHECK(seen.items0.front() == 'B');
  CHECK(seen.items0.substr(1) == std::string(seen.items0.size() - 1, 'd'));
  CHECK(seen.data0 == framed(sub0_records));
  CHECK(seen.items1 == "Bd");
}

namespace {

struct no_input_seen {
  std::size_t acks = 99;
  std::size_t declines = 99;
  checkpoint_id acked = 0;
  int unconsumed_calls = -1;
  std::optional<task_state> state;
};

task<void> no_input_case(std::string chk, no_input_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  {
    task_harness h(memory, /*has_input=*/false);
    h.subject.operators = {{section_index(state_section::source), bytes_of("offset=7")}};
    io::result<void> taken = co_await h.checkpoint.take(3, checkpoint_mode::unaligned, chk);
    REQUIRE(taken.ok());
    co_await runtime::sleep_for(5ms);  // no finish_input: a task without input needs none
    seen->acks = h.acknowledger.acks.size();
    seen->declines = h.acknowledger.declines.size();
    if (!h.acknowledger.acks.empty()) seen->acked = h.acknowledger.acks[0].id;
    seen->unconsumed_calls = h.subject.unconsumed_calls;
    co_await h.checkpoint.close();
  }
  io::result<task_state> state = co_await read_state_file(state_path(chk), "chk-3", {.checkpoint = 3});
  REQUIRE(state.ok());
  seen->state = std::move(state).value();
}

}  // namespace

TEST_CASE("a task without input acknowledges its unaligned snapshot once written, with no finish_input",
          "[task_checkpoint]") {
  temp_dir dir;
  no_input_seen seen;
  sync_wait(no_input_case(chk_dir(dir, 3), &seen), test::virtual_time());
  CHECK(seen.acks == 1);
  CHECK(seen.acked == 3);
  CHECK(seen.declines == 0);
  CHECK(seen.unconsumed_calls == 1);
  REQUIRE(seen.state.has_value());
  CHECK(seen.state->input_channels.empty());
  CHECK(seen.state->output_channels.empty());  // nothing was queued
  CHECK(seen.state->operator_state.size() == 1);
  CHECK(seen.state->operator_state.at(1000) == bytes_of("offset=7"));
}

// --- aligned --------------------------------------------------------------------------------------

namespace {

struct aligned_seen {
  int drain_calls = -1;
  int unconsumed_calls = -1;
  std::string items0, items1;
  std::vector<std::byte> data0;
  std::size_t acks = 99;
  std::optional<task_state> state;
  std::vector<std::pair<record_type, std::uint32_t>> order;
};

const std::vector<std::vector<std::byte>> before_barrier = {bytes_of("emitted before")};
const std::vector<std::vector<std::byte>> backlog_records = {bytes_of("backlog one"), pattern_bytes(2000, 8)};

task<void> aligned_case(std::string chk, bool backlogged, aligned_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  {
    task_harness h(memory, /*has_input=*/true);
    h.subject.operators = {{0, bytes_of("window")}, {1, bytes_of("counts")}};
    h.subject.backlogged = backlogged;
    h.subject.backlog = bytes_of("not stored when aligned");
    h.subject.drained_records = backlog_records;
    co_await emit_all(&h.out, before_barrier, 0);

    io::result<void> taken = co_await h.checkpoint.take(5, checkpoint_mode::aligned, chk);
    REQUIRE(taken.ok());
    seen->drain_calls = h.subject.drain_calls;
    seen->unconsumed_calls = h.subject.unconsumed_calls;
    // Operator state only: it completes without finish_input.
    const checkpoint_outcome outcome = co_await h.checkpoint.writer().result(5);
    REQUIRE(outcome.completed());
    co_await runtime::sleep_for(1ms);
    seen->acks = h.acknowledger.acks.size();
    seen->items0 = poll_all(h.out, 0, 5, &seen->data0);
    seen->items1 = poll_all(h.out, 1, 5, nullptr);
    co_await h.checkpoint.close();
  }
  const test::read_state_file raw = test::parse_state_file(state_path(chk));
  for (const auto& r : raw.records) seen->order.emplace_back(r.header.type, r.header.index);
  io::result<task_state> state = co_await read_state_file(state_path(chk), "chk-5", {.checkpoint = 5});
  REQUIRE(state.ok());
  seen->state = std::move(state).value();
}

}  // namespace

TEST_CASE("an aligned snapshot drains a backlogged output first, stores operator state only, and sends the "
          "barrier in-band after the data",
          "[task_checkpoint]") {
  const bool backlogged = GENERATE(true, false);
  INFO("backlogged: " << backlogged);
  temp_dir dir;
  aligned_seen seen;
  sync_wait(aligned_case(chk_dir(dir, 5), backlogged, &seen), test::virtual_time());

  CHECK(seen.drain_calls == (backlogged ? 1 : 0));
  CHECK(seen.unconsumed_calls == 0);
  CHECK(seen.acks == 1);
  // The barrier follows everything emitted before it, the drained backlog included.
  std::vector<std::vector<std::byte>> sent = before_barrier;
  if (backlogged) sent.insert(sent.end(), backlog_records.begin(), backlog_records.end());
  CHECK(seen.data0 == framed(sent));
  REQUIRE_FALSE(seen.items0.empty());
  CHECK(seen.items0.back() == 'b');
  CHECK(seen.items0.substr(0, seen.items0.size() - 1) == std::string(seen.items0.size() - 1, 'd'));
  CHECK(seen.items1 == "b");

  REQUIRE(seen.state.has_value());
  CHECK(seen.state->input_channels.empty());
  CHECK(seen.state->output_channels.empty());
  CHECK(seen.state->operator_state.size() == 2);  // no backlog section: the output was drained
  CHECK(seen.state->operator_state.at(0) == bytes_of("window"));
  CHECK(seen.state->operator_state.at(1) == bytes_of("counts"));
  CHECK(seen.order == std::vector<std::pair<record_type, std::uint32_t>>{{record_type::operator_state, 0},
                                                                        {record_type::operator_state, 1}});
}

// --- decline, refusal, close ----------------------------------------------------------------------

namespace {

struct decline_seen {
  std::vector<recording_acknowledger::declined> declines;
  std::size_t acks = 99;
  std::optional<checkpoint_outcome> outcome;
  std::string items0, items1;
  std::vector<std::byte> data0;
};

task<void> decline_case(std::string chk, bool taken_first, decline_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/true);
  h.subject.operators = {{0, bytes_of("window")}};
  co_await emit_all(&h.out, before_barrier, 0);
  if (taken_first) {
    io::result<void> taken = co_await h.checkpoint.take(4, checkpoint_mode::unaligned, chk);
    REQUIRE(taken.ok());
    // The barrier went out; drop it so that only the marker is left to see.
    while (auto next = h.out.poll_next(1)) {
    }
  }
  io::result<void> declined = co_await h.checkpoint.decline(4, abort_reason::declined, "alignment gave up");
  REQUIRE(declined.ok());
  co_await runtime::sleep_for(5ms);  // a watcher, if any, reports
  seen->declines = h.acknowledger.declines;
  seen->acks = h.acknowledger.acks.size();
  seen->outcome = h.checkpoint.writer().try_result(4);
  seen->items0 = poll_all(h.out, 0, 4, &seen->data0);
  seen->items1 = poll_all(h.out, 1, 4, nullptr);
  co_await h.checkpoint.close();
}

}  // namespace

TEST_CASE("decline aborts the checkpoint, declines it to the acknowledger and sends a cancellation marker ahead "
          "of the queued data",
          "[task_checkpoint]") {
  const bool taken_first = GENERATE(false, true);
  INFO("taken first: " << taken_first);
  temp_dir dir;
  decline_seen seen;
  sync_wait(decline_case(chk_dir(dir, 4), taken_first, &seen), test::virtual_time());

  REQUIRE_FALSE(seen.declines.empty());
  for (const auto& d : seen.declines) {
    CHECK(d.task == test_task);
    CHECK(d.id == 4);
    CHECK(d.reason == abort_reason::declined);
    CHECK(d.detail == "alignment gave up");
  }
  if (!taken_first) CHECK(seen.declines.size() == 1);
  CHECK(seen.acks == 0);
  REQUIRE(seen.outcome.has_value());
  CHECK_FALSE(seen.outcome->completed());
  CHECK(seen.outcome->reason == abort_reason::declined);
  // The marker is a priority event: ahead of the queued data (behind the barrier, when one went first).
  CHECK(seen.items0 == (taken_first ? "BCd" : "Cd"));
  CHECK(seen.data0 == framed(before_barrier));
  CHECK(seen.items1 == "C");
}

namespace {

struct refused_seen {
  std::size_t acks = 99;
  std::size_t declines = 99;
  std::size_t queued = 99;
  int unconsumed_calls = -1;
  std::uint64_t opens = 99;
  std::uint64_t writes = 99;
};

task<void> refused_case(std::string dir4, std::string dir3, test_backend* backend, refused_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/false);
  h.subject.operators = {{0, bytes_of("window")}};
  h.subject.input.push_back({0, pattern_bytes(5, 1), std::nullopt});
  h.checkpoint.abort(4, abort_reason::coordinator, "superseded");
  io::result<void> at_aborted = co_await h.checkpoint.take(4, checkpoint_mode::unaligned, dir4);
  REQUIRE(at_aborted.ok());  // refused, not an error: the task runs on
  io::result<void> below_aborted = co_await h.checkpoint.take(3, checkpoint_mode::unaligned, dir3);
  REQUIRE(below_aborted.ok());
  co_await runtime::sleep_for(5ms);
  seen->acks = h.acknowledger.acks.size();
  seen->declines = h.acknowledger.declines.size();
  seen->queued = h.out.queued(0) + h.out.queued(1);
  seen->unconsumed_calls = h.subject.unconsumed_calls;
  seen->opens = backend->submitted(op_code::openat);
  seen->writes = backend->submitted(op_code::write);
  h.subject.input.clear();
  co_await h.checkpoint.close();
}

}  // namespace

TEST_CASE("a snapshot for an id at or below an aborted one reports nothing, sends no barrier and does no I/O",
          "[task_checkpoint]") {
  temp_dir dir;
  refused_seen seen;
  test_backend* backend = nullptr;
  auto options = test::test_backend_options(backend);
  sync_wait(refused_case(chk_dir(dir, 4), chk_dir(dir, 3), backend, &seen), std::move(options));
  CHECK(seen.acks == 0);
  CHECK(seen.declines == 0);
  CHECK(seen.queued == 0);
  CHECK(seen.unconsumed_calls == 0);  // the input is not taken for a checkpoint that is not written
  CHECK(seen.opens == 0);
  CHECK(seen.writes == 0);
  CHECK_FALSE(std::filesystem::exists(state_path(dir.file("chk-4"))));
  CHECK_FALSE(std::filesystem::exists(state_path(dir.file("chk-3"))));
}

namespace {

struct close_seen {
  std::size_t acks = 99;
  std::size_t declines = 99;
  std::optional<checkpoint_outcome> outcome;
  bool closed = false;
  std::size_t waiters = 99;
};

task<void> wait_outcome(channel_state_writer* writer, checkpoint_id id, std::optional<checkpoint_outcome>* out) {
  *out = co_await writer->result(id);
}

task<void> close_case(std::string chk8, std::string chk9, close_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/true);
  h.subject.operators = {{0, bytes_of("window")}};
  io::result<void> taken = co_await h.checkpoint.take(8, checkpoint_mode::unaligned, chk8);
  REQUIRE(taken.ok());
  runtime::scope waiters;
  std::optional<checkpoint_outcome> waited;
  waiters.spawn(wait_outcome(&h.checkpoint.writer(), 8, &waited));
  co_await runtime::sleep_for(5ms);  // written as far as it can be; it waits for finish_input
  REQUIRE_FALSE(waited.has_value());

  co_await h.checkpoint.close();  // resolves the watcher and every waiter
  co_await waiters.join();
  seen->outcome = waited;
  seen->closed = h.checkpoint.writer().closed();
  seen->waiters = h.checkpoint.writer().result_waiters();
  // After close, a snapshot is refused quietly.
  io::result<void> late = co_await h.checkpoint.take(9, checkpoint_mode::unaligned, chk9);
  REQUIRE(late.ok());
  co_await runtime::sleep_for(5ms);
  seen->acks = h.acknowledger.acks.size();
  seen->declines = h.acknowledger.declines.size();
}

}  // namespace

TEST_CASE("close() resolves an ongoing checkpoint as cancelled, reports nothing, and later snapshots are refused",
          "[task_checkpoint]") {
  temp_dir dir;
  close_seen seen;
  sync_wait(close_case(chk_dir(dir, 8), chk_dir(dir, 9), &seen), test::virtual_time());
  REQUIRE(seen.outcome.has_value());
  CHECK_FALSE(seen.outcome->completed());
  CHECK(seen.outcome->reason == abort_reason::cancelled);
  CHECK(seen.closed);
  CHECK(seen.waiters == 0);
  CHECK(seen.acks == 0);
  CHECK(seen.declines == 0);  // a cancellation at shutdown is not a decline
  CHECK_FALSE(std::filesystem::exists(state_path(dir.file("chk-9"))));
}

// --- scenario 7: an I/O error under the task ------------------------------------------------------

namespace {

struct io_error_seen {
  std::vector<recording_acknowledger::declined> declines;
  std::vector<checkpoint_id> acked;
  std::size_t items0 = 0;  // the partition still works: what subpartition 0 carries
};

// The first write of checkpoint 5's state file (its header, records and end, at once) fails with
// EIO; the task's next checkpoint has no fault.
task<void> io_error_case(std::string chk5, std::string chk6, test_backend* backend, io_error_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/false);
  h.subject.operators = {{0, bytes_of("count")}};
  int writes = 0;
  backend->add_fault([&writes](const runtime::io_op& op) -> std::optional<std::int32_t> {
    if (op.code != op_code::write) return std::nullopt;
    return ++writes == 1 ? std::optional<std::int32_t>(-EIO) : std::nullopt;
  });
  io::result<void> five = co_await h.checkpoint.take(5, checkpoint_mode::unaligned, chk5);
  REQUIRE(five.ok());
  co_await runtime::sleep_for(5ms);
  io::result<void> six = co_await h.checkpoint.take(6, checkpoint_mode::unaligned, chk6);
  REQUIRE(six.ok());
  co_await runtime::sleep_for(5ms);
  seen->declines = h.acknowledger.declines;
  for (const auto& a : h.acknowledger.acks) seen->acked.push_back(a.id);
  seen->items0 = poll_all(h.out, 0, 6, nullptr).size();
  co_await h.checkpoint.close();
}

}  // namespace

TEST_CASE("scenario 7: an I/O error in a task's state write declines that checkpoint with the cause, and the "
          "task's next checkpoint is acknowledged",
          "[task_checkpoint][scenario]") {
  temp_dir dir;
  io_error_seen seen;
  test_backend* backend = nullptr;
  auto options = test::test_backend_options(backend);
  const std::string chk5 = chk_dir(dir, 5);
  sync_wait(io_error_case(chk5, chk_dir(dir, 6), backend, &seen), std::move(options));
  REQUIRE(seen.declines.size() == 1);
  CHECK(seen.declines[0].task == test_task);
  CHECK(seen.declines[0].id == 5);
  CHECK(seen.declines[0].reason == abort_reason::io_error);
  CHECK(seen.declines[0].detail == "write '" + state_path(chk5) + "': Input/output error");
  CHECK(seen.acked == std::vector<checkpoint_id>{6});
  CHECK(seen.items0 == 2);  // barriers 5 and 6 went out: the task carried on
}

// --- scenario 9: cancelled while the checkpoint's output is pending ---------------------------------

namespace {

struct output_pending_seen {
  bool write_in_flight = false;  // the operator state's record write, when the task is cancelled
  bool output_pending = false;   // undecided: the barrier is still queued, finish_output not called
  std::chrono::nanoseconds close_took{-1};
  std::optional<checkpoint_outcome> outcome;
  std::size_t pending_ops = 99;
  std::size_t acks = 99;
  std::size_t declines = 99;
  std::string items0;
};

// A source snapshots aligned with a timeout while its output is backpressured: the barrier waits in
// the partition behind data, and the checkpoint's output half stays open until the barrier leaves or
// the timeout switches it (switch_after_timeout). The task is cancelled then, with the operator
// state's write in flight too.
task<void> cancel_with_output_pending(std::string chk, test_backend* backend, output_pending_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/false, /*alignment_timeout=*/10s);
  h.subject.operators = {{0, bytes_of("count")}};
  h.subject.backlog = std::vector<std::byte>{};  // an output tail: the barrier may switch later
  std::vector<std::vector<std::byte>> queued{bytes_of("a"), bytes_of("b")};
  co_await emit_all(&h.out, std::move(queued), 0);  // nobody polls the partition
  backend->set_auto(false);
  io::result<void> taken = co_await h.checkpoint.take(3, checkpoint_mode::aligned_timeout, chk);
  REQUIRE(taken.ok());
  co_await test::turns(3);
  runtime::io_op* open = test::oldest_op(*backend);
  REQUIRE(open != nullptr);
  backend->perform(*open);
  co_await test::turns(3);  // the file header and the operator state: one write, in flight
  seen->write_in_flight = test::pending_op(*backend, op_code::write) != nullptr;
  seen->output_pending = !h.checkpoint.writer().try_result(3).has_value();
  runtime::scope waiters;
  waiters.spawn(wait_outcome(&h.checkpoint.writer(), 3, &seen->outcome));
  co_await test::turns(2);

  std::stop_source cancel;  // the task is cancelled
  cancel.request_stop();
  runtime::executor& ex = *runtime::executor::current();
  const auto before = ex.now();
  co_await runtime::with_stop_token(h.checkpoint.close(), cancel.get_token());
  seen->close_took = ex.now() - before;
  co_await waiters.join();
  seen->pending_ops = test::pending_count(*backend);
  seen->acks = h.acknowledger.acks.size();
  seen->declines = h.acknowledger.declines.size();
  seen->items0 = poll_all(h.out, 0, 3, nullptr);
}

}  // namespace

TEST_CASE("scenario 9: a task cancelled while its checkpoint's output is pending and a state write is in flight "
          "closes at once, reporting nothing",
          "[task_checkpoint][scenario]") {
  temp_dir dir;
  output_pending_seen seen;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(cancel_with_output_pending(chk_dir(dir, 3), backend, &seen), std::move(options));
  CHECK(seen.write_in_flight);
  CHECK(seen.output_pending);
  CHECK(seen.close_took == std::chrono::nanoseconds(0));  // no alignment timeout waited out
  REQUIRE(seen.outcome.has_value());
  CHECK(seen.outcome->reason == abort_reason::cancelled);
  CHECK(seen.pending_ops == 0);
  CHECK(seen.acks == 0);
  CHECK(seen.declines == 0);      // a cancellation is not a decline
  // The announcement went ahead with priority; the barrier stayed in-band: no switch after the cancel.
  CHECK(seen.items0 == "Adb");
}

// --- an unaligned sink's precommit beside the task ----------------------------------------------

namespace {

struct sink_beside_seen {
  int holds = 0;
  std::vector<checkpoint_id> sink_state_ids;
  std::size_t failures = 0;
  std::string failure;
  std::vector<recording_acknowledger::declined> declines;
  std::size_t acks = 0;
};

// The sink's state is taken after take() returned (the task goes on meanwhile), with the sink held
// from the barrier on; a failed precommit declines the checkpoint and fails the task.
task<void> sink_precommit_beside(std::string chk6, std::string chk7, sink_beside_seen* seen) {
  bf::network_memory memory(64 * segment_bytes, segment_bytes, 1);
  task_harness h(memory, /*has_input=*/true);
  h.subject.sink = true;
  h.subject.sink_bytes = bytes_of("staged");
  io::result<void> six = co_await h.checkpoint.take(6, checkpoint_mode::unaligned, chk6);
  REQUIRE(six.ok());
  CHECK(h.subject.holds == 1);
  CHECK(h.subject.sink_state_ids.empty());  // not awaited in line: it runs beside the task
  h.checkpoint.finish_input(6);
  const checkpoint_outcome outcome = co_await h.checkpoint.writer().result(6);
  CHECK(outcome.completed());
  h.subject.sink_error = io::error(std::make_error_code(std::errc::io_error), "precommit: broker gone");
  io::result<void> seven = co_await h.checkpoint.take(7, checkpoint_mode::unaligned, chk7);
  REQUIRE(seven.ok());
  h.checkpoint.finish_input(7);
  co_await runtime::sleep_for(5ms);
  seen->holds = h.subject.holds;
  seen->sink_state_ids = h.subject.sink_state_ids;
  seen->failures = h.subject.failures.size();
  if (!h.subject.failures.empty()) seen->failure = h.subject.failures.front().message();
  seen->declines = h.acknowledger.declines;
  seen->acks = h.acknowledger.acks.size();
  co_await h.checkpoint.close();
}

}  // namespace

TEST_CASE("an unaligned sink's precommit runs beside the task, holding the sink, and its failure declines the "
          "checkpoint and fails the task",
          "[task_checkpoint]") {
  temp_dir dir;
  sink_beside_seen seen;
  sync_wait(sink_precommit_beside(chk_dir(dir, 6), chk_dir(dir, 7), &seen), test::virtual_time());
  CHECK(seen.holds == 2);
  CHECK(seen.sink_state_ids == std::vector<checkpoint_id>{6, 7});
  CHECK(seen.acks == 1);
  REQUIRE(seen.declines.size() == 1);
  CHECK(seen.declines[0].id == 7);
  CHECK(seen.declines[0].reason == abort_reason::io_error);
  CHECK(seen.failures == 1);
  CHECK(seen.failure.find("broker gone") != std::string::npos);
  const auto file = test::parse_state_file(state_path(dir.file("chk-6")));
  const auto sink = std::find_if(file.records.begin(), file.records.end(), [](const auto& r) {
    return r.header.index == section_index(state_section::sink);
  });
  REQUIRE(sink != file.records.end());
  CHECK(sink->payload == bytes_of("staged"));
}
