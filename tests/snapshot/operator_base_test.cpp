// Incremental checkpoints in the state file (state_file.hpp): the operator_base record, which says an
// operator's state in a file is a delta on the same task's file of an earlier checkpoint. The
// reader records it (state_file_summary::bases, task_state::operator_bases) and rejects a base that
// could not end a chain; the channel-state writer writes it (add_operator_base).

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>
#include <sluice/snapshot/state_file_reader.hpp>

#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::bytes_of;
using sluice::test::state_file_builder;

namespace {

const std::string label = "chk-9/task-2.state";

std::vector<std::byte> base_payload(checkpoint_id base) {
  const auto payload = encode_operator_base_payload(base);
  return {payload.begin(), payload.end()};
}

// Checkpoint 9 of task 2: operator 0 a delta on checkpoint 7, operator 1 whole, operator 3 a delta
// on checkpoint 4 (its base record after its state: the order of records does not matter).
std::vector<std::byte> delta_file() {
  state_file_builder b(9, 2);
  b.add(record_type::operator_base, 0, 0, base_payload(7));
  b.add(record_type::operator_state, 0, 0, bytes_of("delta-0"));
  b.add(record_type::operator_state, 0, 1, bytes_of("whole-1"));
  b.add(record_type::input_channel, 0, 0, bytes_of("in-flight"));
  b.add(record_type::operator_state, 0, 3, bytes_of("delta-3"));
  b.add(record_type::operator_base, 0, 3, base_payload(4));
  return b.finish();
}

std::string error_of(const sluice::io::result<state_file_summary>& r) { return r.ok() ? "" : r.error().message(); }

// A file of checkpoint 9 whose only record is an operator_base record with `payload`.
std::vector<std::byte> file_with_base_payload(std::span<const std::byte> payload, std::uint16_t group = 0) {
  state_file_builder b(9, 2);
  b.add(record_type::operator_base, group, 5, payload);
  return b.finish();
}

}  // namespace

TEST_CASE("a state file with operator base records names its bases and which operator each belongs to") {
  const auto bytes = delta_file();
  const auto summary = validate_state_bytes(bytes, label, {.checkpoint = 9, .task = 2});
  REQUIRE(summary.ok());
  CHECK(summary->bases == std::vector<checkpoint_id>{4, 7});
  CHECK(summary->records == 6);
  // The base records' 8 bytes are neither operator nor channel state.
  CHECK(summary->operator_state_bytes == 7 + 7 + 7);
  CHECK(summary->channel_state_bytes == 9);

  sluice::test::temp_dir dir;
  const std::string path = dir.file("task-2.state");
  sluice::test::write_bytes(path, bytes);
  auto state = sync_wait(read_state_file(path, label, {.checkpoint = 9, .task = 2}));
  REQUIRE(state.ok());
  CHECK(state->summary.bases == std::vector<checkpoint_id>{4, 7});
  CHECK(state->operator_bases == std::map<std::uint32_t, checkpoint_id>{{0, 7}, {3, 4}});
  CHECK(state->operator_state.at(0) == bytes_of("delta-0"));
  CHECK(state->operator_state.at(1) == bytes_of("whole-1"));
  CHECK(state->operator_state.at(3) == bytes_of("delta-3"));
  CHECK(state->operator_chain.empty());  // load()'s to fill
}

TEST_CASE("two operators based on one checkpoint list it once, and a file without bases lists none") {
  state_file_builder b(9, 2);
  b.add(record_type::operator_base, 0, 0, base_payload(7));
  b.add(record_type::operator_base, 0, 1, base_payload(7));
  const auto summary = validate_state_bytes(b.finish(), label);
  REQUIRE(summary.ok());
  CHECK(summary->bases == std::vector<checkpoint_id>{7});

  state_file_builder whole(9, 2);
  whole.add(record_type::operator_state, 0, 0, bytes_of("state"));
  const auto plain = validate_state_bytes(whole.finish(), label);
  REQUIRE(plain.ok());
  CHECK(plain->bases.empty());
}

TEST_CASE("an operator base record that is not 8 bytes is a format error in its header") {
  for (const std::size_t length : {0u, 7u, 9u, 16u}) {
    INFO("payload of " << length << " bytes");
    const std::vector<std::byte> payload(length);
    const auto r = validate_state_bytes(file_with_base_payload(payload), label);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == storage_errc::bad_format);
    CHECK(error_of(r) == fmt::format("chk-9/task-2.state: record 0: operator base record payload length {} (expected 8)",
                                     length));
  }
  // The header decoder alone says so too.
  const auto header = encode_record_header({record_type::operator_base, 0, 0, 9, 0, 0});
  const auto decoded = decode_record_header(header, "h");
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.error().message() == "h: operator base record payload length 9 (expected 8)");
  const auto good = decode_record_header(encode_record_header({record_type::operator_base, 0, 4, 8, 0, 0}), "h");
  REQUIRE(good.ok());
  CHECK(good->type == record_type::operator_base);
}

TEST_CASE("a base of 0, of this checkpoint or a later one, or in a group is rejected") {
  for (const checkpoint_id base : {checkpoint_id{0}, checkpoint_id{9}, checkpoint_id{10}, ~checkpoint_id{0}}) {
    INFO("base " << base);
    const auto r = validate_state_bytes(file_with_base_payload(base_payload(base)), label);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == storage_errc::bad_format);
    CHECK(error_of(r) == fmt::format("chk-9/task-2.state: record 0: operator 5 is based on checkpoint {} (a base is "
                                     "above 0 and below this file's checkpoint 9)",
                                     base));
  }
  CHECK(validate_state_bytes(file_with_base_payload(base_payload(8)), label).ok());
  CHECK(validate_state_bytes(file_with_base_payload(base_payload(1)), label).ok());

  const auto grouped = validate_state_bytes(file_with_base_payload(base_payload(8), 1), label);
  CHECK(error_of(grouped) == "chk-9/task-2.state: record 0: operator base record with group 1 (expected 0)");
}

TEST_CASE("an operator with two base records is rejected, even when both name the same checkpoint") {
  for (const checkpoint_id second : {checkpoint_id{3}, checkpoint_id{7}}) {
    state_file_builder b(9, 2);
    b.add(record_type::operator_base, 0, 4, base_payload(7));
    b.add(record_type::operator_state, 0, 4, bytes_of("delta"));
    b.add(record_type::operator_base, 0, 4, base_payload(second));
    const auto r = validate_state_bytes(b.finish(), label);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == storage_errc::bad_format);
    CHECK(error_of(r) == fmt::format("chk-9/task-2.state: record 2: operator 4 has a second base record (checkpoint "
                                     "{}, after checkpoint 7)",
                                     second));
  }
}

namespace {

struct written_file {
  checkpoint_outcome outcome;
  std::vector<sluice::io::error> refusals;
};

// Checkpoint 6 of task 3 with operator 0 a delta on checkpoint 2, and the calls the writer refuses.
task<written_file> write_delta_checkpoint(std::string dir) {
  channel_state_writer writer(3);
  written_file out;
  REQUIRE(writer.start(6, dir).ok());
  REQUIRE(writer.add_operator_state(6, 0, bytes_of("delta")).ok());
  REQUIRE(writer.add_operator_base(6, 0, 2).ok());
  REQUIRE(writer.add_operator_state(6, 1, bytes_of("whole")).ok());
  const auto refuse = [&out](sluice::io::result<void> refused) {
    REQUIRE_FALSE(refused.ok());
    out.refusals.push_back(refused.error());
  };
  refuse(writer.add_operator_base(6, 0, 1));  // operator 0 has its base
  refuse(writer.add_operator_base(6, 1, 0));  // 0 names no checkpoint
  refuse(writer.add_operator_base(6, 1, 6));  // not earlier
  refuse(writer.add_operator_base(5, 1, 2));  // not the ongoing checkpoint
  REQUIRE(writer.finish_input(6).ok());
  REQUIRE(writer.finish_output(6).ok());
  out.outcome = co_await writer.result(6);
  refuse(writer.add_operator_base(6, 1, 2));  // completed
  co_await writer.close();
  co_return out;
}

}  // namespace

TEST_CASE("the writer writes an operator's base as a record the reader takes back, and refuses a bad one") {
  sluice::test::temp_dir dir;
  const auto written = sync_wait(write_delta_checkpoint(dir.path()));
  REQUIRE(written.outcome.completed());
  CHECK(written.outcome.operator_state_bytes == 10);  // the base's 8 bytes are not operator state
  CHECK(written.outcome.channel_state_bytes == 0);

  auto state = sync_wait(read_state_file(dir.file("task-3.state"), "chk-6/task-3.state", {.checkpoint = 6, .task = 3}));
  REQUIRE(state.ok());
  CHECK(state->operator_bases == std::map<std::uint32_t, checkpoint_id>{{0, 2}});
  CHECK(state->summary.bases == std::vector<checkpoint_id>{2});
  CHECK(state->operator_state.at(0) == bytes_of("delta"));
  CHECK(state->operator_state.at(1) == bytes_of("whole"));
  CHECK(state->summary.operator_state_bytes == written.outcome.operator_state_bytes);

  REQUIRE(written.refusals.size() == 5);
  for (std::size_t i = 0; i < 3; ++i) CHECK(written.refusals[i].code() == writer_errc::bad_base);
  CHECK(written.refusals[0].message() ==
        "add_operator_base for checkpoint 6 of task 3: operator 0 already has a base in this checkpoint");
  CHECK(written.refusals[1].message() ==
        "add_operator_base for checkpoint 6 of task 3: operator 1 cannot be based on checkpoint 0 (a base is above 0 "
        "and below the checkpoint)");
  CHECK_THAT(written.refusals[2].message(), Catch::Contains("operator 1 cannot be based on checkpoint 6"));
  CHECK(written.refusals[3].code() == writer_errc::aborted);  // 5 is older than the ongoing 6
  CHECK(written.refusals[4].code() == writer_errc::finished);
}
