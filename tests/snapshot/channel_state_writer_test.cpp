// The channel-state writer's lifecycle: scenarios 1-6 of docs/scenarios.md, one named test each, with
// the interleaving forced through the hand-driven test backend; and how result(id) answers.
// Scenarios 7-9, 13 and 14 are in channel_state_writer_fault_test.cpp.

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

// --- scenario 1 -------------------------------------------------------------------------------

namespace {

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

// The writes in flight, oldest first (the writer issues a batch of record writes at once).
std::vector<runtime::io_op*> pending_writes(const test_backend& backend) {
  std::vector<runtime::io_op*> out;
  for (runtime::io_op* op : backend.pending()) {
    if (op->code == op_code::write) out.push_back(op);
  }
  return out;
}

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

  // Open, then one write: the file header, the three records (copied: their buffers are back
  // before it completes) and the end.
  co_await test::turns(3);
  backend->perform(*test::oldest_op(*backend));  // the open
  co_await test::turns(3);
  const std::vector<runtime::io_op*> in_flight = pending_writes(*backend);
  REQUIRE(in_flight.size() == 1);
  CHECK(in_flight[0]->len > state_file_header_bytes + 4 * state_record_header_bytes);
  CHECK(pool.recycled() == 3);
  const auto writes_at_abort = backend->submitted(op_code::write);

  writer.abort(4, abort_reason::expired, {});
  co_await test::turns(2);
  backend->perform(*in_flight[0]);
  co_await test::run_io(backend);
  CHECK(pool.recycled() == 3);
  CHECK(backend->submitted(op_code::write) == writes_at_abort);  // no write issued after the abort (no end record)
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
  // The aborted checkpoint's file is left as its one write made it: whole, end record included, as
  // the abort came while that write was in flight; unsynced, and no manifest will name it.
  CHECK_NOTHROW(test::parse_state_file(state_path(dir.file("chk-4"))));
}

TEST_CASE("scenario 3: abort after completion leaves the checkpoint completed", "[channel_state_writer]") {
  temp_dir dir;
  sync_wait(abort_after_completion(chk_dir(dir, 4)), test::virtual_time());
  CHECK(test::parse_state_file(state_path(dir.file("chk-4"))).records.size() == 2);
}

namespace {

// As above, but one record header's write completes short after the abort: finishing that header
// would be a write for 4 issued after the abort.
task<void> abort_then_short_write(std::string chk, test_backend* backend, std::uint64_t* issued_after_abort,
                                  std::uint64_t* recycled) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  backend->set_auto(false);
  REQUIRE(writer.start(4, chk).ok());
  REQUIRE(writer.add_input(4, 1, 2, captured_n(pool, 3, 1)).ok());
  REQUIRE(writer.finish_input(4).ok());
  REQUIRE(writer.finish_output(4).ok());
  co_await test::turns(3);
  backend->perform(*test::oldest_op(*backend));  // the open
  co_await test::turns(3);
  const std::vector<runtime::io_op*> in_flight = pending_writes(*backend);
  REQUIRE(in_flight.size() == 1);  // the header, the three records and the end, in one write
  const auto writes_at_abort = backend->submitted(op_code::write);
  writer.abort(4, abort_reason::expired, {});
  backend->perform(*in_flight[0], 10);  // 10 of its bytes
  co_await test::run_io(backend);
  *issued_after_abort = backend->submitted(op_code::write) - writes_at_abort;
  co_await writer.close();
  *recycled = pool.recycled();
}

}  // namespace

// Was a bug (now fixed; this test failed before the fix): file::write_all goes on after a short write, and the writer
// checked for an abort only between a record's header and its payload, so the rest of a short header
// was written after the abort. Now the records go out in one write: the rest of it must not follow.
TEST_CASE("scenario 3: after the abort, a short write in flight is not completed by another write",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  std::uint64_t issued = 99;
  std::uint64_t recycled = 0;
  sync_wait(abort_then_short_write(chk_dir(dir, 4), backend, &issued, &recycled), std::move(options));
  CHECK(recycled == 3);
  CHECK(issued == 0);
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
  co_await test::turns(3);
  backend->perform(*test::oldest_op(*backend));  // the open
  co_await test::turns(3);
  // The file header and the six records go out in one write, the records copied: their buffers
  // are back before it completes.
  const std::vector<runtime::io_op*> batch = pending_writes(*backend);
  REQUIRE(batch.size() == 1);
  CHECK(batch[0]->len == state_file_header_bytes + 6 * (state_record_header_bytes + 100));
  CHECK(pool.recycled() == 6);
  // Two more while it is in flight: queued behind it (one write at a time).
  REQUIRE(writer.add_input(4, 0, 1, captured_n(pool, 2, 30)).ok());
  co_await test::turns(3);
  CHECK(pending_writes(*backend).size() == 1);
  CHECK(pool.recycled() == 6);

  REQUIRE(writer.start(5, chk5).ok());  // 4 is subsumed
  CHECK(writer.ongoing() == 5);
  CHECK(pool.recycled() == 8);  // the queued ones at once, each exactly once
  const auto four = writer.try_result(4);
  REQUIRE(four.has_value());
  CHECK(four->reason == abort_reason::subsumed);
  CHECK(four->detail == "checkpoint 5 started");

  REQUIRE(writer.add_input(5, 0, 0, captured_n(pool, 2, 40)).ok());
  REQUIRE(writer.finish_input(5).ok());
  REQUIRE(writer.finish_output(5).ok());
  const auto writes_at_start = backend->submitted(op_code::write);
  backend->perform(*batch[0]);  // 4's write completes; nothing more is written for 4
  co_await test::turns(3);
  CHECK(backend->submitted(op_code::write) == writes_at_start);
  co_await test::run_io(backend);
  const checkpoint_outcome five = co_await writer.result(5);
  CHECK(five.completed());
  CHECK(five.channel_state_bytes == 200);
  CHECK(pool.recycled() == 10);

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
  check_pool(pool, 11);
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
