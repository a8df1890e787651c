// The channel-state writer under faults and shutdown: scenarios 7 (I/O errors), 8 (an event as
// data), 9 (cancellation), 13 (aligned checkpoints) and 14 (bounded bookkeeping) of docs/scenarios.md.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>

#include <snapshot/writer_support.hpp>
#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::snapshot;
using buffers::buffer_kind;
using buffers::local_buffer_pool;
using buffers::network_memory;
using runtime::op_code;
using runtime::sync_wait;
using runtime::task;
using runtime::test_backend;
using test::captured;
using test::captured_n;
using test::pattern_bytes;
using test::temp_dir;

namespace {

constexpr task_id test_task = 3;
constexpr std::size_t segment_bytes = 4096;

std::string chk_dir(const temp_dir& dir, checkpoint_id id) {
  std::string path = dir.file("chk-" + std::to_string(id));
  std::filesystem::create_directories(path);
  return path;
}
std::string state_path(const std::string& chk) { return chk + "/" + state_file_name(test_task); }
// 'path', appended piecewise: GCC 12 at -O3 warns falsely (-Wrestrict) on "'" + std::string.
std::string quoted(const std::string& path) {
  std::string out(1, '\'');
  out.append(path);
  out.push_back('\'');
  return out;
}

// Awaits result(id) into *out (a child of a scope, so the test can act while it waits).
task<void> wait_result(channel_state_writer* writer, checkpoint_id id, std::optional<checkpoint_outcome>* out) {
  *out = co_await writer->result(id);
}

void check_pool(const local_buffer_pool& pool, std::uint64_t handed) {
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  CHECK(pool.recycled() == handed);
}

}  // namespace

// --- scenario 7 -------------------------------------------------------------------------------

namespace {

task<void> io_error_then_next(std::string chk8, std::string chk9, test_backend* backend, std::int32_t injected) {
  network_memory memory(32 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 32);
  channel_state_writer writer(test_task);
  int writes = 0;
  // The file's one write fails: its header, the records (copied) and the end, at once.
  backend->add_fault([&writes, injected](const runtime::io_op& op) -> std::optional<std::int32_t> {
    if (op.code != op_code::write) return std::nullopt;
    return ++writes == 1 ? std::optional<std::int32_t>(injected) : std::nullopt;
  });

  REQUIRE(writer.start(8, chk8).ok());
  REQUIRE(writer.add_input(8, 0, 0, captured_n(pool, 6, 1)).ok());
  REQUIRE(writer.add_operator_state(8, 2, pattern_bytes(300, 2)).ok());
  REQUIRE(writer.finish_input(8).ok());
  REQUIRE(writer.finish_output(8).ok());
  const checkpoint_outcome eight = co_await writer.result(8);
  REQUIRE_FALSE(eight.completed());
  CHECK(eight.reason == abort_reason::io_error);
  CHECK(eight.detail.find(quoted(state_path(chk8))) != std::string::npos);
  co_await test::turns(4);
  CHECK(pool.recycled() == 6);  // every view: copied into the write that failed
  CHECK(writer.queued_writes() == 0);
  auto late = writer.add_input(8, 0, 0, captured_n(pool, 1, 9));
  CHECK(late.error().code() == writer_errc::aborted);

  backend->clear_faults();
  REQUIRE(writer.start(9, chk9).ok());
  REQUIRE(writer.add_input(9, 0, 0, captured_n(pool, 2, 10)).ok());
  REQUIRE(writer.finish_input(9).ok());
  REQUIRE(writer.finish_output(9).ok());
  const checkpoint_outcome nine = co_await writer.result(9);
  CHECK(nine.completed());
  co_await writer.close();
  check_pool(pool, 9);
  co_return;
}

}  // namespace

TEST_CASE("scenario 7: ENOSPC, EIO or a write without progress declines that checkpoint with the cause, and the next one succeeds",
          "[channel_state_writer][faults]") {
  const std::int32_t injected = GENERATE(-ENOSPC, -EIO, 0);
  INFO("injected write result " << injected);
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  const std::string chk8 = chk_dir(dir, 8);
  sync_wait(io_error_then_next(chk8, chk_dir(dir, 9), backend, injected), std::move(options));
  CHECK_THROWS(test::parse_state_file(state_path(chk8)));
  CHECK(test::parse_state_file(state_path(dir.file("chk-9"))).records.size() == 2);
}

namespace {

task<void> fsync_error(std::string chk, test_backend* backend) {
  network_memory memory(8 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 8);
  channel_state_writer writer(test_task);
  backend->add_fault([](const runtime::io_op& op) -> std::optional<std::int32_t> {
    return op.code == op_code::fsync ? std::optional<std::int32_t>(-EIO) : std::nullopt;
  });
  REQUIRE(writer.start(2, chk).ok());
  REQUIRE(writer.add_output(2, 0, 0, captured_n(pool, 2, 1)).ok());
  REQUIRE(writer.finish_input(2).ok());
  REQUIRE(writer.finish_output(2).ok());
  const checkpoint_outcome two = co_await writer.result(2);
  CHECK(two.reason == abort_reason::io_error);
  CHECK(two.detail == "fsync " + quoted(state_path(chk)) + ": Input/output error");
  co_await writer.close();
  check_pool(pool, 2);
}

}  // namespace

TEST_CASE("scenario 7: EIO on the final fsync declines the checkpoint naming the file", "[channel_state_writer][faults]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(fsync_error(chk_dir(dir, 2), backend), std::move(options));
}

// --- scenario 8 -------------------------------------------------------------------------------

namespace {

task<void> event_as_data(std::string chk, std::string chk_next) {
  network_memory memory(8 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 8);
  channel_state_writer writer(test_task);
  REQUIRE(writer.start(3, chk).ok());
  std::vector<buffers::buffer_view> mixed;
  mixed.push_back(captured(pool, pattern_bytes(50, 1)));
  mixed.push_back(captured(pool, pattern_bytes(8, 2), buffer_kind::event));
  mixed.push_back(captured(pool, pattern_bytes(50, 3)));
  auto added = writer.add_input(3, 1, 4, std::move(mixed));
  REQUIRE_FALSE(added.ok());
  CHECK(added.error().code() == writer_errc::not_data);
  CHECK(added.error().message() == "add_input for checkpoint 3 of task 3: input channel (1, 4) was handed an event, not data");
  CHECK(pool.recycled() == 3);
  const std::optional<checkpoint_outcome> three = writer.try_result(3);  // declined at once
  REQUIRE(three.has_value());
  CHECK(three->reason == abort_reason::declined);

  REQUIRE(writer.start(4, chk_next).ok());
  REQUIRE(writer.add_input(4, 1, 4, captured_n(pool, 2, 5)).ok());
  REQUIRE(writer.finish_input(4).ok());
  REQUIRE(writer.finish_output(4).ok());
  const checkpoint_outcome four = co_await writer.result(4);
  CHECK(four.completed());
  co_await writer.close();
  check_pool(pool, 5);
}

}  // namespace

TEST_CASE("scenario 8: an event handed as data is rejected and the data buffers passed with it are recycled",
          "[channel_state_writer]") {
  temp_dir dir;
  sync_wait(event_as_data(chk_dir(dir, 3), chk_dir(dir, 4)), test::virtual_time());
}

// --- scenario 9 -------------------------------------------------------------------------------

namespace {

task<void> cancel_with_write_pending(std::string chk, test_backend* backend) {
  network_memory memory(8 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 8);
  channel_state_writer writer(test_task);
  backend->set_auto(false);
  REQUIRE(writer.start(11, chk).ok());
  REQUIRE(writer.add_input(11, 0, 0, captured_n(pool, 3, 1)).ok());
  co_await test::turns(3);
  backend->perform(*test::oldest_op(*backend));  // the open
  co_await test::turns(3);
  REQUIRE(test::pending_op(*backend, op_code::write) != nullptr);  // the write (header, records) hangs

  std::optional<checkpoint_outcome> pending_result;
  std::optional<checkpoint_outcome> future_result;
  runtime::scope waiters;
  waiters.spawn(wait_result(&writer, 11, &pending_result));
  waiters.spawn(wait_result(&writer, 12, &future_result));  // not even started
  co_await test::turns(2);

  co_await writer.close();  // the executor performs nothing by itself: the cancel ends the write
  CHECK(backend->submitted(op_code::cancel) >= 1);
  // close() wakes every waiter; a waiter left waiting would hang here, so the test bounds the wait
  // (virtual time: the timer fires only once nothing else can run).
  const bool woken = co_await runtime::with_timeout(waiters.join(), std::chrono::seconds(10));
  CHECK(woken);
  REQUIRE(pending_result.has_value());
  CHECK(pending_result->reason == abort_reason::cancelled);
  REQUIRE(future_result.has_value());
  CHECK(future_result->reason == abort_reason::cancelled);
  CHECK(test::pending_count(*backend) == 0);
  co_await writer.close();  // idempotent
  check_pool(pool, 3);
}

task<checkpoint_outcome> result_under(channel_state_writer* writer, checkpoint_id id, std::stop_token token) {
  co_return co_await runtime::with_stop_token(writer->result(id), std::move(token));
}

task<void> stop_result_wait(std::stop_source* stop) {
  co_await test::turns(3);
  stop->request_stop();
}

task<void> cancel_result_waiter(std::string chk) {
  channel_state_writer writer(test_task);
  REQUIRE(writer.start(1, chk).ok());
  std::stop_source stop;
  runtime::scope s;
  s.spawn(stop_result_wait(&stop));
  const checkpoint_outcome outcome = co_await result_under(&writer, 1, stop.get_token());
  co_await s.join();
  CHECK(outcome.reason == abort_reason::cancelled);
  CHECK(outcome.detail == "the task waiting for checkpoint 1 was stopped");
  CHECK(writer.ongoing() == 1);  // stopping a waiter does not abort the checkpoint
  CHECK(writer.result_waiters() == 0);
  co_await writer.close();
}

}  // namespace

TEST_CASE("scenario 9: cancelling the task while a state write and result waits are pending completes without hanging",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(cancel_with_write_pending(chk_dir(dir, 11), backend), std::move(options));
}

TEST_CASE("scenario 9: a task stopped while it waits for a result resumes with aborted(cancelled)",
          "[channel_state_writer]") {
  temp_dir dir;
  sync_wait(cancel_result_waiter(chk_dir(dir, 1)), test::virtual_time());
}

// --- scenario 13 ------------------------------------------------------------------------------

namespace {

task<void> aligned_checkpoint(std::string chk, test_backend* backend) {
  network_memory memory(8 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 8);
  channel_state_writer writer(test_task);
  std::vector<operator_snapshot> states;
  states.push_back({0, pattern_bytes(1000, 1)});
  states.push_back({2, pattern_bytes(10, 2)});
  REQUIRE(writer.start_aligned(21, chk, std::move(states)).ok());
  auto input = writer.add_input(21, 0, 0, captured_n(pool, 1, 3));
  CHECK(input.error().code() == writer_errc::no_channel_state);
  auto output = writer.add_output(21, 0, 0, captured_n(pool, 1, 4));
  CHECK(output.error().code() == writer_errc::no_channel_state);
  CHECK(pool.recycled() == 2);
  auto late_state = writer.add_operator_state(21, 3, pattern_bytes(5, 5));
  CHECK(late_state.error().code() == writer_errc::finished);
  const checkpoint_outcome outcome = co_await writer.result(21);  // no finish call needed
  REQUIRE(outcome.completed());
  CHECK(outcome.channel_state_bytes == 0);
  CHECK(outcome.operator_state_bytes == 1010);
  co_await writer.close();
  if (backend != nullptr) CHECK(backend->submitted(op_code::write) == 1);  // header, both records and end at once
  check_pool(pool, 2);
}

}  // namespace

TEST_CASE("scenario 13: an aligned checkpoint never opens a channel-state write, only operator state",
          "[channel_state_writer]") {
  const auto kind = GENERATE(test::backend_kind::uring, test::backend_kind::test);
  INFO("backend: " << test::to_string(kind));
  temp_dir dir;
  const std::string chk = chk_dir(dir, 21);
  test_backend* backend = nullptr;
  auto options = kind == test::backend_kind::test ? test::test_backend_options(backend) : test::backend_options(kind);
  sync_wait(aligned_checkpoint(chk, backend), std::move(options));
  const auto file = test::parse_state_file(state_path(chk));
  REQUIRE(file.records.size() == 2);
  for (const auto& r : file.records) CHECK(r.header.type == record_type::operator_state);
  CHECK(file.records[0].header.index == 0);
  CHECK(file.records[0].payload == pattern_bytes(1000, 1));
  CHECK(file.records[1].header.index == 2);
  CHECK(file.records[1].payload == pattern_bytes(10, 2));
}

// --- scenario 14 ------------------------------------------------------------------------------

namespace {

task<void> bounded_bookkeeping(std::string chk, test_backend* backend) {
  network_memory memory(8 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 8);
  channel_state_writer writer(test_task);
  backend->set_auto(false);
  const std::size_t bound = 2 + channel_state_writer::outcome_history;
  std::size_t most = 0;
  std::uint64_t handed = 0;
  checkpoint_id id = 1;
  for (int round = 0; round < 500; ++round, id += 3) {
    // A start that subsumes the previous one, data, an abort of the next id before its start, the
    // refused start and data of that id, and an abort of an old id.
    auto started = writer.start(id, chk);
    CHECK(started.ok());
    auto added = writer.add_input(id, 0, 0, captured_n(pool, 1, static_cast<std::uint32_t>(round)));
    CHECK(added.ok());
    writer.abort(id + 1, abort_reason::expired, {});
    auto refused_start = writer.start(id + 1, chk);
    CHECK(refused_start.error().code() == writer_errc::aborted);
    auto refused = writer.add_input(id + 1, 0, 0, captured_n(pool, 1, 7));
    CHECK(refused.error().code() == writer_errc::aborted);
    handed += 2;
    writer.abort(id - 1, abort_reason::coordinator, {});
    if (round % 50 == 0) co_await test::turns(3);  // let the pump start an open now and then
    if (round % 97 == 0) {
      while (test::pending_count(*backend) > 0) {
        backend->perform(*test::oldest_op(*backend));
        co_await test::turns(3);
      }
    }
    most = std::max(most, writer.tracked_checkpoints());
    CHECK(writer.tracked_checkpoints() <= bound);
    for (checkpoint_id old = 1; old < id; old += 37) CHECK(writer.try_result(old).has_value());
  }
  CHECK(most <= bound);
  CHECK(writer.try_result(id + 100) == std::nullopt);  // a future id waits
  co_await writer.close();
  while (test::pending_count(*backend) > 0) {
    backend->perform(*test::oldest_op(*backend));
    co_await test::turns(3);
  }
  CHECK(writer.tracked_checkpoints() <= bound);
  check_pool(pool, handed);
}

}  // namespace

TEST_CASE("scenario 14: under a thousand interleaved starts and aborts the writer tracks a bounded number of checkpoints",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(bounded_bookkeeping(chk_dir(dir, 1), backend), std::move(options));
}

