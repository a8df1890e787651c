// The channel-state writer's lifecycle, one named test per scenario of scenarios.md (1-9, 13, 14),
// each forcing its interleaving through the test backend, plus a byte-exact read-back.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>

#include <snapshot/writer_support.hpp>
#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <cerrno>
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

// --- scenario 1 -------------------------------------------------------------------------------

task<void> abort_before_start(std::string chk, test_backend* backend) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);

  writer.abort(5, abort_reason::expired, "coordinator timeout");
  auto started = writer.start(5, chk);
  REQUIRE_FALSE(started.ok());
  CHECK(started.error().code() == writer_errc::aborted);
  CHECK(started.error().message() == "start for checkpoint 5 of task 3: checkpoint 5 was aborted (expired: coordinator timeout)");
  CHECK(writer.ongoing() == no_checkpoint);

  auto added = writer.add_input(5, 0, 1, captured_n(pool, 3, 1));
  REQUIRE_FALSE(added.ok());
  CHECK(added.error().code() == writer_errc::aborted);
  CHECK(pool.recycled() == 3);  // at once, not later
  auto out = writer.add_output(5, 0, 0, captured_n(pool, 2, 10));
  CHECK(out.error().code() == writer_errc::aborted);
  auto op = writer.add_operator_state(5, 0, pattern_bytes(10, 1));
  CHECK(op.error().code() == writer_errc::aborted);
  auto finished = writer.finish_input(5);
  CHECK(finished.error().code() == writer_errc::aborted);

  const checkpoint_outcome outcome = co_await writer.result(5);
  CHECK_FALSE(outcome.completed());
  CHECK(outcome.reason == abort_reason::expired);
  CHECK(outcome.detail == "coordinator timeout");
  co_await test::turns(4);
  co_await writer.close();

  CHECK(backend->submitted(op_code::openat) == 0);
  CHECK(backend->submitted(op_code::write) == 0);
  check_pool(pool, 5);
}

}  // namespace

TEST_CASE("scenario 1: abort before start makes the start a no-op, the result aborted, with no I/O and buffers recycled once",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(abort_before_start(chk_dir(dir, 5), backend), std::move(options));
  CHECK_FALSE(std::filesystem::exists(state_path(dir.file("chk-5"))));
}

// --- scenario 2 -------------------------------------------------------------------------------

namespace {

task<void> abort_between_start_and_snapshot(std::string chk, test_backend* backend) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  backend->set_auto(false);

  REQUIRE(writer.start(7, chk).ok());
  auto early = writer.add_input(7, 0, 0, captured_n(pool, 2, 1));
  REQUIRE(early.ok());
  co_await test::turns(4);
  REQUIRE(test::pending_op(*backend, op_code::openat) != nullptr);  // the pump opens the file
  std::optional<checkpoint_outcome> waited;
  runtime::scope waiters;
  waiters.spawn(wait_result(&writer, 7, &waited));
  co_await test::turns(2);
  REQUIRE_FALSE(waited.has_value());

  writer.abort(7, abort_reason::coordinator, "task 9 declined");
  CHECK(pool.recycled() == 2);  // queued, never issued: released at the abort

  // The task now takes its snapshot: every call sees "aborted", nothing throws.
  auto op = writer.add_operator_state(7, 0, pattern_bytes(64, 7));
  CHECK(op.error().code() == writer_errc::aborted);
  auto out = writer.add_output(7, 0, 0, captured_n(pool, 1, 5));
  CHECK(out.error().code() == writer_errc::aborted);
  auto fin = writer.finish_output(7);
  CHECK(fin.error().code() == writer_errc::aborted);
  const checkpoint_outcome now = co_await writer.result(7);
  CHECK(now.reason == abort_reason::coordinator);

  co_await waiters.join();
  REQUIRE(waited.has_value());
  CHECK_FALSE(waited->completed());
  CHECK(waited->detail == "task 9 declined");

  // The open completes after the abort: the file is closed, nothing is written.
  backend->perform(*test::pending_op(*backend, op_code::openat));
  co_await test::run_io(backend);
  CHECK(backend->submitted(op_code::write) == 0);
  CHECK(backend->submitted(op_code::close) == 1);
  co_await writer.close();
  check_pool(pool, 3);
}

}  // namespace

TEST_CASE("scenario 2: abort between start and the snapshot: the snapshot and the result see aborted, never missing",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(abort_between_start_and_snapshot(chk_dir(dir, 7), backend), std::move(options));
}

// --- scenario 3 -------------------------------------------------------------------------------

namespace {

task<void> abort_after_result_taken(std::string chk, test_backend* backend) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  backend->set_auto(false);

  REQUIRE(writer.start(4, chk).ok());
  REQUIRE(writer.add_input(4, 1, 2, captured_n(pool, 3, 1)).ok());
  REQUIRE(writer.finish_input(4).ok());
  REQUIRE(writer.finish_output(4).ok());
  std::optional<checkpoint_outcome> waited;
  runtime::scope waiters;
  waiters.spawn(wait_result(&writer, 4, &waited));  // the result is taken before the abort

  // Open, file header, then the first record's header goes in flight.
  for (int i = 0; i < 2; ++i) {
    co_await test::turns(3);
    backend->perform(*test::oldest_op(*backend));
  }
  co_await test::turns(3);
  runtime::io_op* in_flight = test::pending_op(*backend, op_code::write);
  REQUIRE(in_flight != nullptr);
  REQUIRE(in_flight->len == state_record_header_bytes);
  const auto writes_at_abort = backend->submitted(op_code::write);

  writer.abort(4, abort_reason::expired, {});
  CHECK(pool.recycled() == 2);  // the two queued records; the in-flight one waits for its write
  co_await test::turns(2);
  CHECK(pool.recycled() == 2);
  backend->perform(*in_flight);
  co_await test::run_io(backend);
  CHECK(pool.recycled() == 3);
  CHECK(backend->submitted(op_code::write) == writes_at_abort);  // no write issued after the abort
  CHECK(backend->submitted(op_code::fsync) == 0);

  co_await waiters.join();
  REQUIRE(waited.has_value());
  CHECK_FALSE(waited->completed());
  CHECK(waited->reason == abort_reason::expired);
  co_await writer.close();
  check_pool(pool, 3);
}

task<void> abort_after_completion(std::string chk) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  REQUIRE(writer.start(4, chk).ok());
  REQUIRE(writer.add_output(4, 0, 1, captured_n(pool, 2, 1)).ok());
  REQUIRE(writer.finish_input(4).ok());
  REQUIRE(writer.finish_output(4).ok());
  const checkpoint_outcome done = co_await writer.result(4);
  REQUIRE(done.completed());
  writer.abort(4, abort_reason::coordinator, "too late");
  const checkpoint_outcome after = co_await writer.result(4);
  CHECK(after.completed());
  CHECK(after.channel_state_bytes == 200);
  co_await writer.close();
  const checkpoint_outcome closed = co_await writer.result(4);
  CHECK(closed.completed());
  check_pool(pool, 2);
}

}  // namespace

TEST_CASE("scenario 3: abort after the result was taken resolves it aborted and issues no further write",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(abort_after_result_taken(chk_dir(dir, 4), backend), std::move(options));
  // The aborted checkpoint's file is left as it is, without an end record.
  CHECK_THROWS(test::parse_state_file(state_path(dir.file("chk-4"))));
}

TEST_CASE("scenario 3: abort after completion leaves the checkpoint completed", "[channel_state_writer]") {
  temp_dir dir;
  sync_wait(abort_after_completion(chk_dir(dir, 4)), test::virtual_time());
  CHECK(test::parse_state_file(state_path(dir.file("chk-4"))).records.size() == 2);
}

// --- scenarios 4 and 5 ------------------------------------------------------------------------

namespace {

task<void> start_while_open(std::string chk4, std::string chk5, test_backend* backend) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  backend->set_auto(false);

  REQUIRE(writer.start(4, chk4).ok());
  REQUIRE(writer.add_input(4, 0, 0, captured_n(pool, 4, 1)).ok());
  REQUIRE(writer.add_output(4, 0, 0, captured_n(pool, 2, 20)).ok());
  for (int i = 0; i < 3; ++i) {  // open, file header, first record header
    co_await test::turns(3);
    backend->perform(*test::oldest_op(*backend));
  }
  co_await test::turns(3);
  runtime::io_op* payload_write = test::pending_op(*backend, op_code::write);
  REQUIRE(payload_write != nullptr);
  REQUIRE(payload_write->len == 100);  // the first buffer's payload is in flight

  REQUIRE(writer.start(5, chk5).ok());  // 4 is subsumed
  CHECK(writer.ongoing() == 5);
  CHECK(pool.recycled() == 5);  // every queued buffer of 4 at once ...
  const auto four = writer.try_result(4);
  REQUIRE(four.has_value());
  CHECK(four->reason == abort_reason::subsumed);
  CHECK(four->detail == "checkpoint 5 started");

  REQUIRE(writer.add_input(5, 0, 0, captured_n(pool, 2, 40)).ok());
  REQUIRE(writer.finish_input(5).ok());
  REQUIRE(writer.finish_output(5).ok());
  backend->perform(*payload_write);
  co_await test::turns(3);
  CHECK(pool.recycled() == 6);  // ... and the in-flight one once its write is done
  co_await test::run_io(backend);
  const checkpoint_outcome five = co_await writer.result(5);
  CHECK(five.completed());
  CHECK(five.channel_state_bytes == 200);

  // Scenario 5: a barrier for 4 after 5 started is ignored, without I/O.
  const auto opens = backend->submitted(op_code::openat);
  auto late = writer.start(4, chk4);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code() == writer_errc::stale);
  auto late_data = writer.add_input(4, 0, 0, captured_n(pool, 1, 60));
  CHECK(late_data.error().code() == writer_errc::aborted);
  co_await test::turns(4);
  CHECK(backend->submitted(op_code::openat) == opens);
  const checkpoint_outcome still = co_await writer.result(4);
  CHECK(still.reason == abort_reason::subsumed);
  co_await writer.close();
  check_pool(pool, 9);
}

}  // namespace

TEST_CASE("scenario 4: start of N+1 while N is open subsumes N and recycles each of its buffers exactly once",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(start_while_open(chk_dir(dir, 4), chk_dir(dir, 5), backend), std::move(options));
  const auto five = test::parse_state_file(state_path(dir.file("chk-5")));
  CHECK(five.header.checkpoint == 5);
  CHECK(five.records.size() == 2);
}

// --- scenario 6 -------------------------------------------------------------------------------

namespace {

task<void> data_out_of_lifecycle(std::string chk, test_backend* backend) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);

  auto before = writer.add_input(6, 0, 2, captured_n(pool, 2, 1));
  REQUIRE_FALSE(before.ok());
  CHECK(before.error().code() == writer_errc::not_started);
  CHECK(before.error().message() == "add_input for checkpoint 6 of task 3: checkpoint 6 has not started");
  CHECK(pool.recycled() == 2);
  auto zero = writer.add_output(0, 0, 0, captured_n(pool, 1, 3));
  CHECK(zero.error().code() == writer_errc::invalid_id);
  CHECK(pool.recycled() == 3);

  REQUIRE(writer.start(6, chk).ok());
  REQUIRE(writer.add_input(6, 0, 2, captured_n(pool, 1, 4)).ok());
  REQUIRE(writer.finish_input(6).ok());
  auto after_finish = writer.add_input(6, 0, 2, captured_n(pool, 2, 5));
  REQUIRE_FALSE(after_finish.ok());
  CHECK(after_finish.error().code() == writer_errc::finished);
  CHECK(after_finish.error().message() == "add_input for checkpoint 6 of task 3: the input of checkpoint 6 is finished");
  CHECK(pool.recycled() == 5);
  REQUIRE(writer.add_output(6, 1, 0, captured_n(pool, 1, 7)).ok());  // output is still open
  REQUIRE(writer.finish_output(6).ok());
  REQUIRE(writer.finish_output(6).ok());  // repeating a finish is harmless
  const checkpoint_outcome six = co_await writer.result(6);
  CHECK(six.completed());
  auto after_completion = writer.add_output(6, 1, 0, captured_n(pool, 1, 8));
  CHECK(after_completion.error().code() == writer_errc::finished);

  co_await writer.close();
  auto after_close = writer.add_input(6, 0, 2, captured_n(pool, 3, 9));
  REQUIRE_FALSE(after_close.ok());
  CHECK(after_close.error().code() == writer_errc::closed);
  CHECK(after_close.error().message() == "add_input for checkpoint 6 of task 3: the channel-state writer is closed");
  auto start_after_close = writer.start(7, chk);
  CHECK(start_after_close.error().code() == writer_errc::closed);
  const checkpoint_outcome seven = co_await writer.result(7);
  CHECK(seven.reason == abort_reason::cancelled);
  CHECK(backend->submitted(op_code::openat) == 1);
  check_pool(pool, 11);
}

}  // namespace

TEST_CASE("scenario 6: data before start, after finish or after close gets a clear error and is recycled once",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(data_out_of_lifecycle(chk_dir(dir, 6), backend), std::move(options));
  CHECK(test::parse_state_file(state_path(dir.file("chk-6"))).records.size() == 2);
}

// --- scenario 7 -------------------------------------------------------------------------------

namespace {

task<void> io_error_then_next(std::string chk8, std::string chk9, test_backend* backend, std::int32_t injected) {
  network_memory memory(32 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 32);
  channel_state_writer writer(test_task);
  int writes = 0;
  // The fourth write of the file fails: file header, record 0 header, record 0 payload, record 1 header.
  backend->add_fault([&writes, injected](const runtime::io_op& op) -> std::optional<std::int32_t> {
    if (op.code != op_code::write) return std::nullopt;
    return ++writes == 4 ? std::optional<std::int32_t>(injected) : std::nullopt;
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
  CHECK(pool.recycled() == 6);  // the failed record's view and every queued one
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
  const checkpoint_outcome three = co_await writer.result(3);
  CHECK(three.reason == abort_reason::declined);

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
  for (int i = 0; i < 2; ++i) {  // open, file header
    co_await test::turns(3);
    backend->perform(*test::oldest_op(*backend));
  }
  co_await test::turns(3);
  REQUIRE(test::pending_op(*backend, op_code::write) != nullptr);  // a record write hangs

  std::optional<checkpoint_outcome> pending_result;
  std::optional<checkpoint_outcome> future_result;
  runtime::scope waiters;
  waiters.spawn(wait_result(&writer, 11, &pending_result));
  waiters.spawn(wait_result(&writer, 12, &future_result));  // not even started
  co_await test::turns(2);

  co_await writer.close();  // the executor performs nothing by itself: the cancel ends the write
  CHECK(backend->submitted(op_code::cancel) >= 1);
  co_await waiters.join();
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
  if (backend != nullptr) CHECK(backend->submitted(op_code::write) == 6);  // header, 2 x (header, payload), end
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

// --- how result(id) answers -------------------------------------------------------------------

namespace {

task<void> result_answers(std::string root) {
  channel_state_writer writer(test_task);
  const checkpoint_outcome zero = co_await writer.result(0);
  CHECK(zero.reason == abort_reason::declined);

  std::filesystem::create_directories(root + "/chk-2");
  REQUIRE(writer.start(2, root + "/chk-2").ok());
  REQUIRE(writer.finish_input(2).ok());
  REQUIRE(writer.finish_output(2).ok());
  const checkpoint_outcome two = co_await writer.result(2);
  CHECK(two.completed());

  writer.abort(5, abort_reason::expired, "timeout");  // before its start: kept
  const checkpoint_outcome five = co_await writer.result(5);
  CHECK(five.reason == abort_reason::expired);
  CHECK(five.detail == "timeout");
  for (checkpoint_id never : {1, 3, 4}) {  // never started, at or below a watermark
    const auto outcome = writer.try_result(never);
    REQUIRE(outcome.has_value());
    CHECK(outcome->reason == abort_reason::subsumed);
  }
  CHECK_FALSE(writer.try_result(6).has_value());  // above both watermarks: undecided

  std::filesystem::create_directories(root + "/chk-6");
  REQUIRE(writer.start(6, root + "/chk-6").ok());
  CHECK_FALSE(writer.try_result(6).has_value());  // ongoing
  writer.abort(8, abort_reason::coordinator, {});  // a newer id's abort leaves 6 open
  CHECK(writer.ongoing() == 6);
  CHECK(writer.try_result(8)->reason == abort_reason::coordinator);
  auto seven = writer.start(7, root);
  CHECK(seven.error().code() == writer_errc::aborted);  // older than the aborted 8

  // More outcomes than the history keeps: the last completed stays exact, the rest are subsumed.
  for (checkpoint_id id = 9; id < 9 + 2 * channel_state_writer::outcome_history; ++id) {
    writer.abort(id, abort_reason::expired, {});
  }
  CHECK(writer.tracked_checkpoints() == 1 + channel_state_writer::outcome_history);
  CHECK(writer.try_result(2)->completed());
  CHECK(writer.try_result(5)->reason == abort_reason::subsumed);
  CHECK(writer.try_result(8)->reason == abort_reason::subsumed);

  co_await writer.close();
  CHECK(writer.try_result(6)->reason == abort_reason::cancelled);   // kept: aborted at close
  CHECK(writer.try_result(100)->reason == abort_reason::cancelled);  // the future, after close
  CHECK(writer.try_result(2)->completed());
}

}  // namespace

TEST_CASE("result(id) answers every id as documented: kept outcomes exactly, older ids subsumed, newer ids wait",
          "[channel_state_writer]") {
  temp_dir dir;
  sync_wait(result_answers(dir.path()), test::virtual_time());
}
