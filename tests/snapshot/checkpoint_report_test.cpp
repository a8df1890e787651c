// checkpoint_report: what `sluice checkpoints` prints, checked on real checkpoints (one valid, one
// with a truncated state file, one whose manifest is missing) and on the formatting pieces alone.

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_report.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <support/checkpoint_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::test::make_checkpoint;
using sluice::test::temp_dir;

namespace {

constexpr std::uint64_t april_first_2024_ms = 1712000000000;  // 2024-04-01T19:33:20.000Z

// Commits chk-<id> with two sample tasks and a fixed creation time, so the report is reproducible.
void make_dated_checkpoint(checkpoint_storage& storage, checkpoint_id id, std::uint64_t created_unix_ms) {
  make_checkpoint(storage, id);
  auto manifest = sync_wait(storage.load(id)).value().manifest;
  manifest.created_unix_ms = created_unix_ms;
  sync_wait(storage.commit_manifest(manifest)).value();
}

// chk-1 valid, chk-2 with task 1's state file cut inside record 1, chk-3 without a manifest; listed.
std::vector<checkpoint_info> three_checkpoints(checkpoint_storage& storage) {
  make_dated_checkpoint(storage, 1, april_first_2024_ms);
  make_dated_checkpoint(storage, 2, april_first_2024_ms + 60'000);
  make_dated_checkpoint(storage, 3, april_first_2024_ms + 120'000);
  REQUIRE(::truncate(storage.state_file_path(2, 1).c_str(), sluice::test::sample_record1_payload_offset + 100) == 0);
  REQUIRE(::unlink((storage.checkpoint_dir(3) + "/_manifest").c_str()) == 0);
  return sync_wait(storage.list()).value();
}

std::string missing_manifest_reason(const checkpoint_storage& storage, checkpoint_id id) {
  return "open checkpoint manifest '" + storage.checkpoint_dir(id) +
         "/_manifest': No such file or directory (never committed: aborted, or still being written)";
}

}  // namespace

TEST_CASE("the resume point is the checkpoint recovery chooses: the newest valid one", "[report]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto infos = three_checkpoints(storage);
  REQUIRE(infos.size() == 3);
  CHECK(resume_point(infos) == 1);
  sluice::test::stderr_capture log;  // newest_valid() warns about each checkpoint it skips
  const auto choice = sync_wait(storage.newest_valid()).value();
  CHECK_THAT(log.text(), Catch::Contains("recovery: skipping checkpoint 3 (missing-manifest)"));
  REQUIRE(choice.chosen.has_value());
  CHECK(resume_point(infos) == choice.chosen->id);

  CHECK(resume_point({}) == no_checkpoint);
  std::vector<checkpoint_info> none_valid(infos.begin() + 1, infos.end());
  CHECK(resume_point(none_valid) == no_checkpoint);
}

TEST_CASE("the table lists checkpoints newest first, aligned, with each one's status and the resume point",
          "[report]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto infos = three_checkpoints(storage);
  const std::string expected =
      "   ID  MODE       TASKS  OPERATOR   CHANNEL   WRITTEN     STATE  REQUIRES  CREATED (UTC)             STATUS\n"
      "chk-3  -              -         -         -         -         -  -         -                         invalid "
      "(missing-manifest): " +
      missing_manifest_reason(storage, 3) +
      "\n"
      "chk-2  unaligned      2       8 B  10.4 KiB  10.6 KiB         -  none      2024-04-01T19:34:20.000Z  invalid "
      "(truncated): "
      "chk-2/task-1.state: truncated: record 1 payload needs 5000 bytes, 100 remain\n"
      "chk-1  unaligned      2       8 B  10.4 KiB  10.6 KiB  10.6 KiB  none      2024-04-01T19:33:20.000Z  valid  <- "
      "resume "
      "point\n";
  CHECK(format_table(infos, resume_point(infos)) == expected);
  CHECK(format_summary(infos, resume_point(infos)) == "3 checkpoints, 1 valid; a job started now resumes from chk-1\n");
}

TEST_CASE("the summary says when a job would start from scratch, and an empty directory has no checkpoints",
          "[report]") {
  checkpoint_info broken;
  broken.id = 4;
  broken.fault = storage_errc::missing_manifest;
  broken.reason = "never committed";
  CHECK(format_summary({broken}, no_checkpoint) ==
        "1 checkpoint, 0 valid; a job started now starts from scratch (no valid checkpoint)\n");
  CHECK(format_summary({}, no_checkpoint) == "no checkpoints\n");
  CHECK(format_table({}, no_checkpoint).empty());
}

TEST_CASE("each checkpoint is one JSON line: null for what a missing manifest cannot tell", "[report]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto infos = three_checkpoints(storage);
  const checkpoint_id resume = resume_point(infos);
  CHECK(format_json_line(infos[0], resume) ==
        "{\"id\":1,\"status\":\"valid\",\"reason\":null,\"fault\":null,\"mode\":\"unaligned\",\"tasks\":2,"
        "\"operator_state_bytes\":8,\"channel_state_bytes\":10600,\"size_bytes\":10896,\"written_bytes\":10896,"
        "\"state_bytes\":10896,\"requires\":[],\"created_unix_ms\":1712000000000,\"resume_point\":true}\n");
  CHECK(format_json_line(infos[1], resume) ==
        "{\"id\":2,\"status\":\"invalid\",\"reason\":\"chk-2/task-1.state: truncated: record 1 payload needs 5000 "
        "bytes, 100 remain\",\"fault\":\"truncated\",\"mode\":\"unaligned\",\"tasks\":2,"
        "\"operator_state_bytes\":8,\"channel_state_bytes\":10600,\"size_bytes\":10896,\"written_bytes\":10896,"
        "\"state_bytes\":null,\"requires\":[],\"created_unix_ms\":1712000060000,\"resume_point\":false}\n");
  CHECK(format_json_line(infos[2], resume) ==
        "{\"id\":3,\"status\":\"invalid\",\"reason\":" + json_string(missing_manifest_reason(storage, 3)) +
            ",\"fault\":\"missing-manifest\",\"mode\":null,\"tasks\":null,\"operator_state_bytes\":null,"
            "\"channel_state_bytes\":null,\"size_bytes\":null,\"written_bytes\":null,\"state_bytes\":null,"
            "\"requires\":null,"
            "\"created_unix_ms\":null,\"resume_point\":false}\n");
}

TEST_CASE("a JSON string escapes quotes, backslashes and control characters, and replaces invalid UTF-8",
          "[report]") {
  CHECK(json_string("") == "\"\"");
  CHECK(json_string("chk-7/task-2.state") == "\"chk-7/task-2.state\"");
  CHECK(json_string("say \"hi\" \\ bye") == R"("say \"hi\" \\ bye")");
  CHECK(json_string("a\nb\tc\rd\be\ff") == R"("a\nb\tc\rd\be\ff")");
  CHECK(json_string(std::string("\x01\x1f\x7f", 3)) == R"("\u0001\u001f\u007f")");
  CHECK(json_string(std::string("nul\0byte", 8)) == R"("nul\u0000byte")");
  CHECK(json_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  CHECK(json_string("bad \xff byte") == R"("bad \ufffd byte")");
  CHECK(json_string("overlong \xc0\xaf") == R"("overlong \ufffd\ufffd")");
  CHECK(json_string("surrogate \xed\xa0\x80") == R"("surrogate \ufffd\ufffd\ufffd")");
  CHECK(json_string("cut \xe2\x82") == R"("cut \ufffd\ufffd")");
}

TEST_CASE("sizes print in binary units with one decimal, moving up a unit rather than printing 1024.0",
          "[report]") {
  CHECK(format_size(0) == "0 B");
  CHECK(format_size(1023) == "1023 B");
  CHECK(format_size(1024) == "1.0 KiB");
  CHECK(format_size(10896) == "10.6 KiB");
  CHECK(format_size(1024 * 1024 - 1) == "1.0 MiB");
  CHECK(format_size(10ull * 1024 * 1024) == "10.0 MiB");
  CHECK(format_size(3ull << 40) == "3.0 TiB");
  CHECK(format_size(UINT64_MAX) == "16.0 EiB");
}

TEST_CASE("creation times print as ISO-8601 UTC with milliseconds", "[report]") {
  CHECK(format_iso8601_utc(0) == "1970-01-01T00:00:00.000Z");
  CHECK(format_iso8601_utc(april_first_2024_ms + 123) == "2024-04-01T19:33:20.123Z");
  CHECK(format_iso8601_utc(951782400000) == "2000-02-29T00:00:00.000Z");
  CHECK(format_iso8601_utc(951868799999) == "2000-02-29T23:59:59.999Z");
}
