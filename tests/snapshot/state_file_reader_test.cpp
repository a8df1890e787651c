#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/state_file_reader.hpp>

#include <support/backends.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::test::bytes_of;
using sluice::test::pattern_bytes;
using sluice::test::state_file_builder;

namespace {

// Operator state for operators 0 and 1, two input channels of gate 0 (channel 1 in two parts,
// interleaved with channel 0), and one output subpartition: 32 KiB payloads in the middle.
state_file_builder sample_file(checkpoint_id id = 7, task_id task = 2) {
  state_file_builder b(id, task);
  b.add(record_type::operator_state, 0, 0, bytes_of("offsets:42"));
  b.add(record_type::input_channel, 0, 1, pattern_bytes(32768, 1));
  b.add(record_type::input_channel, 0, 0, bytes_of("c0"));
  b.add(record_type::input_channel, 0, 1, pattern_bytes(100, 2));
  b.add(record_type::output_channel, 1, 3, pattern_bytes(5000, 3));
  b.add(record_type::operator_state, 0, 1, {});
  return b;
}

std::string message_of(const sluice::io::result<state_file_summary>& r) { return r.ok() ? "" : r.error().message(); }

}  // namespace

TEST_CASE("a valid state file parses to its totals fed in one piece or byte by byte") {
  const auto bytes = sample_file().finish();
  auto whole = validate_state_bytes(bytes, "chk-7/task-2.state", {.checkpoint = 7, .task = 2});
  REQUIRE(whole.ok());
  CHECK(whole->checkpoint == 7);
  CHECK(whole->task == 2);
  CHECK(whole->records == 6);
  CHECK(whole->operator_state_bytes == 10);
  CHECK(whole->channel_state_bytes == 32768 + 2 + 100 + 5000);
  CHECK(whole->size_bytes == bytes.size());
  CHECK(whole->crc32c == sluice::buffers::crc32c(bytes));

  state_file_parser parser("x", {});
  for (std::byte b : bytes) parser.feed({&b, 1});
  auto piecewise = parser.finish();
  REQUIRE(piecewise.ok());
  CHECK(piecewise->crc32c == whole->crc32c);
  CHECK(piecewise->channel_state_bytes == whole->channel_state_bytes);
}

TEST_CASE("a state file read through the ring gives each channel's bytes concatenated in file order") {
  const auto kind = GENERATE(sluice::test::backend_kind::uring, sluice::test::backend_kind::test);
  INFO("backend: " << to_string(kind));
  sluice::test::temp_dir dir;
  sluice::test::write_bytes(dir.file("task-2.state"), sample_file().finish());
  auto state = sync_wait(read_state_file(dir.file("task-2.state"), "chk-7/task-2.state", {.checkpoint = 7, .task = 2}),
                         sluice::test::backend_options(kind));
  REQUIRE(state.ok());
  CHECK(state->operator_state.at(0) == bytes_of("offsets:42"));
  CHECK(state->operator_state.at(1).empty());
  auto c1 = pattern_bytes(32768, 1);
  const auto tail = pattern_bytes(100, 2);
  c1.insert(c1.end(), tail.begin(), tail.end());
  CHECK(state->input_channels.at({0, 1}) == c1);
  CHECK(state->input_channels.at({0, 0}) == bytes_of("c0"));
  CHECK(state->input_channels.size() == 2);
  CHECK(state->output_channels.at({1, 3}) == pattern_bytes(5000, 3));
  CHECK(state->summary.records == 6);
}

TEST_CASE("a state file cut inside a payload names the record and the bytes missing") {
  auto bytes = sample_file().finish();
  // Record 1's payload (32768 bytes) starts after the file header, record 0 and record 1's header.
  const std::size_t record1_payload = 32 + 24 + 10 + 24;
  bytes.resize(record1_payload + 100);
  auto r = validate_state_bytes(bytes, "chk-7/task-2.state");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == storage_errc::truncated);
  CHECK(r.error().message() == "chk-7/task-2.state: truncated: record 1 payload needs 32768 bytes, 100 remain");
}

TEST_CASE("a state file cut inside a header or at a record boundary is truncated") {
  const auto full = sample_file().finish();
  auto header_cut = std::vector<std::byte>(full.begin(), full.begin() + 32 + 24 + 10 + 5);
  CHECK(message_of(validate_state_bytes(header_cut, "f")) == "f: truncated: record 1 header needs 24 bytes, 5 remain");
  CHECK(message_of(validate_state_bytes(std::vector<std::byte>(full.begin(), full.begin() + 10), "f")) ==
        "f: truncated: the file header needs 32 bytes, 10 remain");
  CHECK(message_of(validate_state_bytes({}, "f")) == "f: truncated: the file header needs 32 bytes, 0 remain");
  auto no_end = validate_state_bytes(sample_file().unfinished(), "f");
  REQUIRE_FALSE(no_end.ok());
  CHECK(no_end.error().code() == storage_errc::truncated);
  CHECK(no_end.error().message() == "f: missing end record (the file ends after record 5)");
}

TEST_CASE("a flipped payload byte is a bad checksum in that record") {
  auto bytes = sample_file().finish();
  bytes[32 + 24 + 10 + 24 + 500] ^= std::byte{0x40};
  auto r = validate_state_bytes(bytes, "chk-7/task-2.state");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == storage_errc::bad_checksum);
  CHECK(r.error().message() == "chk-7/task-2.state: bad checksum in record 1 (input channel payload, 32768 bytes)");
}

TEST_CASE("a flipped header byte is a bad checksum in that header") {
  auto bytes = sample_file().finish();
  bytes[32 + 24 + 10 + 4] ^= std::byte{1};  // record 1's index
  CHECK(message_of(validate_state_bytes(bytes, "f")) == "f: bad checksum in the header of record 1");
  auto file_header = sample_file().finish();
  file_header[9] ^= std::byte{1};
  CHECK(message_of(validate_state_bytes(file_header, "f")) == "f: bad checksum in the file header");
  auto not_ours = sample_file().finish();
  not_ours[0] = std::byte{'X'};
  CHECK(message_of(validate_state_bytes(not_ours, "f")) == "f: bad magic (not a sluice state file)");
}

TEST_CASE("bytes after the end record are rejected") {
  auto bytes = sample_file().finish();
  bytes.push_back(std::byte{0});
  bytes.push_back(std::byte{0});
  auto r = validate_state_bytes(bytes, "f");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == storage_errc::bad_format);
  CHECK(r.error().message() == "f: 2 bytes after the end record");
}

TEST_CASE("a second end record is rejected as bytes after the first") {
  auto bytes = sample_file().finish();
  const auto first_end_offset = bytes.size() - 24 - 16;
  bytes.insert(bytes.end(), bytes.begin() + static_cast<std::ptrdiff_t>(first_end_offset), bytes.end());
  CHECK(message_of(validate_state_bytes(bytes, "f")) == "f: 40 bytes after the end record");
}

TEST_CASE("records out of sequence and end counts that disagree are rejected") {
  // Records 0 and 1 swapped: record 0's place holds sequence 1.
  state_file_builder a(1, 0);
  a.add(record_type::operator_state, 0, 0, bytes_of("a"));
  state_file_builder b(1, 0);
  b.add(record_type::operator_state, 0, 0, bytes_of("a")).add(record_type::operator_state, 0, 1, bytes_of("b"));
  auto swapped = b.unfinished();
  std::vector<std::byte> out(swapped.begin(), swapped.begin() + 32);
  out.insert(out.end(), swapped.begin() + 32 + 25, swapped.end());
  CHECK(message_of(validate_state_bytes(out, "f")) ==
        "f: record 0 has sequence number 1 (records out of order or missing)");

  auto bad_end = a.unfinished();
  const auto end = encode_end_payload({5, 1});
  const auto header = encode_record_header({record_type::end, 0, 0, 16, sluice::buffers::crc32c(end), 1});
  bad_end.insert(bad_end.end(), header.begin(), header.end());
  bad_end.insert(bad_end.end(), end.begin(), end.end());
  CHECK(message_of(validate_state_bytes(bad_end, "f")) ==
        "f: the end record counts 5 records and 1 payload bytes, the file holds 1 and 1");
}

TEST_CASE("a state file of another checkpoint or task is rejected") {
  const auto bytes = sample_file(6, 2).finish();
  CHECK(message_of(validate_state_bytes(bytes, "chk-7/task-2.state", {.checkpoint = 7})) ==
        "chk-7/task-2.state: the file header names checkpoint 6 (expected 7)");
  CHECK(message_of(validate_state_bytes(bytes, "f", {.task = 3})) == "f: the file header names task 2 (expected 3)");
}

TEST_CASE("a missing state file is an error naming its path") {
  sluice::test::temp_dir dir;
  auto r = sync_wait(validate_state_file(dir.file("task-9.state"), "chk-1/task-9.state"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == std::errc::no_such_file_or_directory);
  CHECK(r.error().message() == "open '" + dir.file("task-9.state") + "': No such file or directory");
}

TEST_CASE("every truncation of a state file and every single flipped bit is rejected without a crash") {
  const auto bytes = sample_file().finish();
  for (std::size_t cut = 0; cut < bytes.size(); cut += 7) {
    auto r = validate_state_bytes(std::span<const std::byte>(bytes).first(cut), "f");
    REQUIRE_FALSE(r.ok());
  }
  for (std::size_t i = 0; i < bytes.size(); i += 13) {
    auto damaged = bytes;
    damaged[i] ^= std::byte{0x10};
    auto r = validate_state_bytes(damaged, "f");
    // Byte 1 of a record header is reserved and, like the file header's reserved bytes, covered by
    // a header CRC: every flip is caught.
    REQUIRE_FALSE(r.ok());
  }
}
