// Scenario 3 with writes the kernel cuts short: once abort(N) happened, the channel-state writer
// submits no further write for N, not even the rest of a short write. A short write of a live
// checkpoint is still continued until every byte is written.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>

#include <snapshot/writer_support.hpp>
#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::snapshot;
using buffers::local_buffer_pool;
using buffers::network_memory;
using runtime::io_op;
using runtime::op_code;
using runtime::sync_wait;
using runtime::task;
using runtime::test_backend;
using test::captured_n;
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

std::vector<io_op*> pending_writes(const test_backend& backend) {
  std::vector<io_op*> out;
  for (io_op* op : backend.pending()) {
    if (op->code == op_code::write) out.push_back(op);
  }
  return out;
}

task<void> short_writes_after_abort(std::string chk4, std::string chk6, test_backend* backend) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  backend->set_auto(false);

  // The file's write (its header, the three records copied, the end) is in flight when abort(4)
  // comes; then the kernel writes only 10 of its bytes.
  REQUIRE(writer.start(4, chk4).ok());
  REQUIRE(writer.add_input(4, 1, 2, captured_n(pool, 3, 1)).ok());
  REQUIRE(writer.finish_input(4).ok());
  REQUIRE(writer.finish_output(4).ok());
  co_await test::turns(3);
  backend->perform(*test::oldest_op(*backend));  // the open
  co_await test::turns(3);
  const std::vector<io_op*> in_flight = pending_writes(*backend);
  REQUIRE(in_flight.size() == 1);
  REQUIRE(in_flight[0]->len > state_file_header_bytes + 4 * state_record_header_bytes);
  const auto writes_at_abort = backend->submitted(op_code::write);
  writer.abort(4, abort_reason::expired, {});
  backend->perform(*in_flight[0], 10u);
  co_await test::run_io(backend);
  CHECK(backend->submitted(op_code::write) == writes_at_abort);  // not the rest, not the end record
  CHECK(pool.recycled() == 3);
  CHECK(backend->submitted(op_code::close) == 1);

  // The first write of checkpoint 6 (its file header and first record) is in flight when abort(6)
  // comes; the kernel writes 5 bytes.
  REQUIRE(writer.start(6, chk6).ok());
  REQUIRE(writer.add_input(6, 0, 0, captured_n(pool, 1, 7)).ok());
  co_await test::turns(3);
  io_op* open = test::pending_op(*backend, op_code::openat);
  REQUIRE(open != nullptr);
  backend->perform(*open);
  co_await test::turns(3);
  io_op* header = test::pending_op(*backend, op_code::write);
  REQUIRE(header != nullptr);
  REQUIRE(header->len > state_file_header_bytes + state_record_header_bytes);
  const auto writes_at_second_abort = backend->submitted(op_code::write);
  writer.abort(6, abort_reason::coordinator, "task 2 declined");
  backend->perform(*header, 5u);
  co_await test::run_io(backend);
  CHECK(backend->submitted(op_code::write) == writes_at_second_abort);
  CHECK(backend->submitted(op_code::close) == 2);

  co_await writer.close();
  CHECK(pool.in_use() == 0);
  CHECK(pool.violations() == 0);
  CHECK(pool.recycled() == 4);
}

// Every write the kernel is asked for writes at most 7 bytes: the live checkpoint still completes.
task<void> short_writes_continue(std::string chk, test_backend* backend, std::uint64_t* writes) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  backend->add_fault([](const io_op& op) -> std::optional<std::int32_t> {
    return op.code == op_code::write && op.len > 7 ? std::optional<std::int32_t>(7) : std::nullopt;
  });
  REQUIRE(writer.start(2, chk).ok());
  REQUIRE(writer.add_input(2, 0, 0, captured_n(pool, 2, 1)).ok());
  REQUIRE(writer.finish_input(2).ok());
  REQUIRE(writer.finish_output(2).ok());
  const checkpoint_outcome two = co_await writer.result(2);
  CHECK(two.completed());
  *writes = backend->submitted(op_code::write);
  co_await writer.close();
  CHECK(pool.in_use() == 0);
}

}  // namespace

TEST_CASE("scenario 3: after abort(N) no write for N is submitted, not even the rest of a short write",
          "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::hand_driven(backend);
  sync_wait(short_writes_after_abort(chk_dir(dir, 4), chk_dir(dir, 6), backend), std::move(options));
  CHECK_THROWS(test::parse_state_file(state_path(dir.file("chk-4"))));
  CHECK_THROWS(test::parse_state_file(state_path(dir.file("chk-6"))));
}

TEST_CASE("a short write of a live checkpoint is continued until every byte is written", "[channel_state_writer]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = test::test_backend_options(backend);
  const std::string chk = chk_dir(dir, 2);
  std::uint64_t writes = 0;
  sync_wait(short_writes_continue(chk, backend, &writes), std::move(options));
  const auto file = test::parse_state_file(state_path(chk));
  CHECK(file.records.size() == 2);
  // A 32-byte file header, 2 records of 24 + 100 bytes and a 40-byte end record: 320 bytes, 7 a write.
  CHECK(writes > 40);
}
