// The channel-state writer's file, byte for byte, on io_uring and on the test backend; and a run of
// many checkpoints while the task keeps handing data between them.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>

#include <snapshot/writer_support.hpp>
#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::snapshot;
using buffers::local_buffer_pool;
using buffers::network_memory;
using runtime::sync_wait;
using runtime::task;
using test::captured;
using test::pattern_bytes;
using test::temp_dir;

namespace {

constexpr task_id test_task = 12;
constexpr std::size_t segment_bytes = 4096;

struct expected_record {
  record_type type;
  std::uint16_t group;
  std::uint32_t index;
  std::vector<std::byte> payload;
};

// The whole file as state_file.hpp defines it, built from the encoders.
std::vector<std::byte> expected_file(checkpoint_id id, const std::vector<expected_record>& records) {
  std::vector<std::byte> out;
  auto append = [&out](std::span<const std::byte> bytes) { out.insert(out.end(), bytes.begin(), bytes.end()); };
  append(encode_file_header({id, test_task}));
  std::uint32_t sequence = 0;
  std::uint64_t payload_bytes = 0;
  for (const auto& r : records) {
    append(encode_record_header({r.type, r.group, r.index, static_cast<std::uint32_t>(r.payload.size()),
                                 buffers::crc32c(r.payload), sequence++}));
    append(r.payload);
    payload_bytes += r.payload.size();
  }
  const auto end = encode_end_payload({sequence, payload_bytes});
  append(encode_record_header({record_type::end, 0, 0, state_end_payload_bytes, buffers::crc32c(end), sequence}));
  append(end);
  return out;
}

task<checkpoint_outcome> write_known_checkpoint(std::string chk, std::vector<expected_record> records) {
  network_memory memory(16 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, 16);
  channel_state_writer writer(test_task);
  REQUIRE(writer.start(10, chk).ok());
  for (auto& r : records) {
    io::result<void> added = io::success();
    if (r.type == record_type::operator_state) {
      added = writer.add_operator_state(10, r.index, r.payload);
    } else {
      std::vector<buffers::buffer_view> views;
      views.push_back(captured(pool, r.payload));
      added = r.type == record_type::input_channel ? writer.add_input(10, r.group, r.index, std::move(views))
                                                   : writer.add_output(10, r.group, r.index, std::move(views));
    }
    REQUIRE(added.ok());
  }
  REQUIRE(writer.add_input(10, 0, 1, {}).ok());  // nothing to write: no record
  REQUIRE(writer.finish_output(10).ok());
  REQUIRE(writer.finish_input(10).ok());
  checkpoint_outcome outcome = co_await writer.result(10);
  co_await writer.close();
  CHECK(pool.in_use() == 0);
  CHECK(pool.recycled() == static_cast<std::uint64_t>(std::count_if(records.begin(), records.end(), [](const auto& r) {
          return r.type != record_type::operator_state;
        })));
  CHECK(pool.violations() == 0);
  co_return outcome;
}

}  // namespace

TEST_CASE("a completed checkpoint's state file reads back byte for byte: header, records, CRCs and the end record",
          "[channel_state_writer][file]") {
  const auto kind = GENERATE(test::backend_kind::uring, test::backend_kind::test);
  INFO("backend: " << test::to_string(kind));
  temp_dir dir;
  const std::string chk = dir.file("chk-10");
  std::filesystem::create_directories(chk);
  const std::vector<expected_record> records = {
      {record_type::input_channel, 0, 1, pattern_bytes(100, 1)},
      {record_type::input_channel, 0, 1, pattern_bytes(segment_bytes, 2)},  // a full segment
      {record_type::output_channel, 2, 3, pattern_bytes(7, 3)},
      {record_type::operator_state, 0, 5, pattern_bytes(333, 4)},
      {record_type::input_channel, 1, 0, pattern_bytes(1, 5)},
  };
  const checkpoint_outcome outcome = sync_wait(write_known_checkpoint(chk, records), test::backend_options(kind));
  REQUIRE(outcome.completed());
  CHECK(outcome.channel_state_bytes == 100 + segment_bytes + 7 + 1);
  CHECK(outcome.operator_state_bytes == 333);

  const std::string path = chk + "/task-12.state";
  CHECK(test::file_bytes(path) == expected_file(10, records));

  const auto file = test::parse_state_file(path);  // the reader's view agrees
  CHECK(file.header == state_file_header{10, test_task});
  REQUIRE(file.records.size() == records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    CHECK(file.records[i].header.type == records[i].type);
    CHECK(file.records[i].header.group == records[i].group);
    CHECK(file.records[i].header.index == records[i].index);
    CHECK(file.records[i].header.sequence == i);
    CHECK(file.records[i].payload == records[i].payload);
  }
  CHECK(file.end.records == 5);
  CHECK(file.end.payload_bytes == 100 + segment_bytes + 7 + 1 + 333);
  CHECK(file.size_bytes == state_file_header_bytes + 6 * state_record_header_bytes + file.end.payload_bytes +
                               state_end_payload_bytes);
}

// The records go out in batches (consecutive small ones copied into one write of up to 512 KiB) and
// a payload above 128 KiB from its own memory: whatever the mix, the file is the same bytes.
TEST_CASE("a state file written in batches and in place reads back byte for byte", "[channel_state_writer][file]") {
  const auto kind = GENERATE(test::backend_kind::uring, test::backend_kind::test);
  INFO("backend: " << test::to_string(kind));
  temp_dir dir;
  const std::string chk = dir.file("chk-10");
  std::filesystem::create_directories(chk);
  std::vector<expected_record> records;
  records.push_back({record_type::input_channel, 0, 1, pattern_bytes(100, 1)});
  // Seven states of 100 KiB: more than one batch, each copied.
  for (std::uint32_t i = 0; i < 7; ++i) records.push_back({record_type::operator_state, 0, i, pattern_bytes(100 * 1024, 2 + i)});
  records.push_back({record_type::output_channel, 2, 3, pattern_bytes(segment_bytes, 9)});
  records.push_back({record_type::operator_state, 0, 7, pattern_bytes(300 * 1024 + 3, 10)});  // in place
  records.push_back({record_type::input_channel, 1, 0, pattern_bytes(1, 11)});
  records.push_back({record_type::operator_state, 0, 8, pattern_bytes(128 * 1024, 12)});  // the largest copied
  const checkpoint_outcome outcome = sync_wait(write_known_checkpoint(chk, records), test::backend_options(kind));
  REQUIRE(outcome.completed());
  CHECK(outcome.channel_state_bytes == 100 + segment_bytes + 1);
  CHECK(test::file_bytes(chk + "/task-12.state") == expected_file(10, records));
}

namespace {

// Twenty checkpoints in a row; between the calls the task yields, so the pump writes while more
// data arrives. Each file must hold exactly the data handed for it, in order.
task<void> checkpoints_in_a_row(std::string root) {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 8, 64);
  channel_state_writer writer(test_task);
  std::uint64_t handed = 0;
  for (checkpoint_id id = 1; id <= 20; ++id) {
    const std::string chk = root + "/chk-" + std::to_string(id);
    std::filesystem::create_directories(chk);
    REQUIRE(writer.start(id, chk).ok());
    std::uint64_t bytes = 0;
    for (std::uint32_t i = 0; i < 30; ++i) {
      const auto payload = pattern_bytes(1 + (i * 131) % segment_bytes, static_cast<std::uint32_t>(id * 100 + i));
      std::vector<buffers::buffer_view> views;
      views.push_back(captured(pool, payload));
      bytes += payload.size();
      ++handed;
      auto added = (i % 3 == 0) ? writer.add_output(id, 0, i % 4, std::move(views))
                                : writer.add_input(id, 1, i % 5, std::move(views));
      REQUIRE(added.ok());
      if (i % 4 == 0) co_await runtime::yield();
    }
    REQUIRE(writer.finish_output(id).ok());
    REQUIRE(writer.finish_input(id).ok());
    const checkpoint_outcome outcome = co_await writer.result(id);
    REQUIRE(outcome.completed());
    CHECK(outcome.channel_state_bytes == bytes);
    CHECK(writer.tracked_checkpoints() <= 2 + channel_state_writer::outcome_history);
  }
  co_await writer.close();
  CHECK(pool.in_use() == 0);
  CHECK(pool.recycled() == handed);
  CHECK(pool.violations() == 0);
}

}  // namespace

TEST_CASE("twenty checkpoints in a row on io_uring each leave a valid file with exactly their data",
          "[channel_state_writer][file]") {
  temp_dir dir;
  sync_wait(checkpoints_in_a_row(dir.path()));
  for (checkpoint_id id = 1; id <= 20; ++id) {
    INFO("checkpoint " << id);
    const auto file = test::parse_state_file(dir.file("chk-" + std::to_string(id)) + "/task-12.state");
    CHECK(file.header.checkpoint == id);
    REQUIRE(file.records.size() == 30);
    for (std::uint32_t i = 0; i < 30; ++i) {
      CHECK(file.records[i].payload ==
            pattern_bytes(1 + (i * 131) % segment_bytes, static_cast<std::uint32_t>(id * 100 + i)));
    }
  }
}

// --- written before durable -------------------------------------------------------------------

namespace {

struct written_seen {
  std::vector<checkpoint_id> written_before_fsync;  // on_written calls when the fsync was pending
  bool undecided_at_fsync = false;                  // result(id) still open with the fsync pending
  std::uintmax_t file_bytes_at_fsync = 0;
  std::vector<checkpoint_id> written_total;
  std::optional<checkpoint_outcome> outcome;
};

// Checkpoint 4: operator state only; every operation is performed for real by hand, the fsync
// failing (EIO) when `fail_fsync`.
task<void> written_then_synced(std::string chk, runtime::test_backend* backend, bool fail_fsync, written_seen* seen) {
  backend->set_auto(false);
  channel_state_writer writer(test_task);
  writer.on_written([seen](checkpoint_id id) { seen->written_total.push_back(id); });
  std::vector<operator_snapshot> ops;
  ops.push_back({0, pattern_bytes(3000, 1)});
  REQUIRE(writer.start_aligned(4, chk, std::move(ops)).ok());
  for (int step = 0; step < 50 && !seen->outcome; ++step) {
    co_await test::turns(3);
    runtime::io_op* op = test::oldest_op(*backend);
    if (op == nullptr) {
      seen->outcome = writer.try_result(4);
      continue;
    }
    if (op->code == runtime::op_code::fsync) {
      seen->written_before_fsync = seen->written_total;
      seen->undecided_at_fsync = !writer.try_result(4).has_value();
      std::error_code ec;
      seen->file_bytes_at_fsync = std::filesystem::file_size(chk + "/" + state_file_name(test_task), ec);
      if (fail_fsync) {
        backend->complete(*op, -EIO);
        continue;
      }
    }
    backend->perform(*op);
  }
  backend->set_auto(true);
  co_await writer.close();
}

}  // namespace

TEST_CASE("the writer reports a checkpoint written once its file holds every byte, before the fsync decides it") {
  temp_dir dir;
  const std::string chk = dir.file("chk-4");
  std::filesystem::create_directories(chk);
  const bool fail_fsync = GENERATE(false, true);
  INFO("fsync fails: " << fail_fsync);
  runtime::test_backend* backend = nullptr;
  written_seen seen;
  auto options = test::hand_driven(backend);
  sync_wait(written_then_synced(chk, backend, fail_fsync, &seen), std::move(options));
  CHECK(seen.written_before_fsync == std::vector<checkpoint_id>{4});
  CHECK(seen.written_total == std::vector<checkpoint_id>{4});  // once
  CHECK(seen.undecided_at_fsync);
  CHECK(seen.file_bytes_at_fsync == expected_file(4, {{record_type::operator_state, 0, 0, pattern_bytes(3000, 1)}}).size());
  REQUIRE(seen.outcome.has_value());
  CHECK(seen.outcome->completed() == !fail_fsync);
  if (fail_fsync) CHECK(seen.outcome->reason == abort_reason::io_error);
}
