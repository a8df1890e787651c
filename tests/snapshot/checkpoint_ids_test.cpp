// Checkpoint ids on disk never wrap: only chk-<1..2^62> names a checkpoint; any other chk-* entry is
// reported invalid with its reason, and never resumed from, removed, or taken as the base of the
// next id; at the largest valid id recovery refuses instead of wrapping.

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_report.hpp>
#include <sluice/snapshot/recovery_plan.hpp>

#include <support/checkpoint_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::test::temp_dir;

namespace fs = std::filesystem;

namespace {

void make_bad_dir(const checkpoint_storage& storage, const std::string& name) {
  fs::create_directories(storage.root() + "/" + name);
  std::ofstream(storage.root() + "/" + name + "/_manifest") << "not a manifest\n";
}

}  // namespace

TEST_CASE("only ids from 1 to 2^62 name a checkpoint, and every other chk-* name says why", "[storage][ids]") {
  CHECK(max_checkpoint_id == 4611686018427387904ull);
  CHECK(checkpoint_storage::parse_dir_name("chk-1") == checkpoint_id{1});
  CHECK(checkpoint_storage::parse_dir_name("chk-4611686018427387904") == max_checkpoint_id);
  CHECK_FALSE(checkpoint_storage::parse_dir_name("chk-4611686018427387905"));

  CHECK_FALSE(checkpoint_storage::bad_dir_name_reason("chk-7"));
  CHECK_FALSE(checkpoint_storage::bad_dir_name_reason("task-7"));  // not a checkpoint's name at all
  CHECK(checkpoint_storage::bad_dir_name_reason("chk-18446744073709551615") ==
        "checkpoint id 18446744073709551615 is above the largest valid id 4611686018427387904 (2^62)");
  CHECK(checkpoint_storage::bad_dir_name_reason("chk-99999999999999999999999") ==
        "checkpoint id 99999999999999999999999 is above the largest valid id 4611686018427387904 (2^62)");
  CHECK(checkpoint_storage::bad_dir_name_reason("chk-007") == "the id has a leading zero");
  CHECK(checkpoint_storage::bad_dir_name_reason("chk-0") == "checkpoint id 0 means \"no checkpoint\"");
  for (const char* name : {"chk-", "chk-7.tmp", "chk--7", "chk-x"}) {
    INFO(name);
    CHECK(checkpoint_storage::bad_dir_name_reason(name) == "the id is not a decimal number");
  }
}

TEST_CASE("a chk-* entry with an impossible id is listed invalid with its reason and never sets the next id",
          "[storage][ids]") {
  temp_dir dir;
  checkpoint_storage storage(dir.file("checkpoints"));
  sluice::test::make_checkpoint(storage, 4);
  make_bad_dir(storage, "chk-18446744073709551615");
  make_bad_dir(storage, "chk-9223372036854775807");

  const auto infos = sync_wait(storage.list()).value();
  REQUIRE(infos.size() == 3);
  // The bad names first (id 0), by name, then the checkpoints ascending.
  CHECK(infos[0].name == "chk-18446744073709551615");
  CHECK(infos[0].id == no_checkpoint);
  CHECK_FALSE(infos[0].valid);
  CHECK(infos[0].fault == storage_errc::bad_name);
  CHECK(infos[0].path == storage.root() + "/chk-18446744073709551615");
  CHECK(infos[0].reason ==
        "chk-18446744073709551615: not a checkpoint: checkpoint id 18446744073709551615 is above the largest valid "
        "id 4611686018427387904 (2^62); ignored: never resumed from, never removed, never the base of the next id");
  CHECK(infos[1].name == "chk-9223372036854775807");
  CHECK(infos[2].name == "chk-4");
  CHECK(infos[2].valid);
  CHECK(resume_point(infos) == 4);

  sluice::test::stderr_capture log;  // the plan warns about each entry it ignores
  const recovery_plan plan = sync_wait(plan_recovery(storage)).value();
  const std::string logged = log.text();
  CHECK(plan.recovered_id() == 4);
  CHECK(plan.next_checkpoint_id == 5);
  REQUIRE(plan.ignored.size() == 2);
  CHECK(plan.ignored[0].name == "chk-18446744073709551615");
  CHECK(logged.find("ignoring '" + storage.root() + "/chk-9223372036854775807' (bad-name)") != std::string::npos);

  // Retention keeps to checkpoints: the bad entries stay.
  const auto report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.removed.empty());
  CHECK(fs::exists(storage.root() + "/chk-18446744073709551615/_manifest"));
}

TEST_CASE("a directory holding only impossible ids starts at checkpoint 1", "[storage][ids]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_bad_dir(storage, "chk-18446744073709551615");
  sluice::test::stderr_capture log;
  const recovery_plan plan = sync_wait(plan_recovery(storage)).value();
  CHECK_FALSE(plan.checkpoint.has_value());
  CHECK(plan.next_checkpoint_id == 1);
}

TEST_CASE("an id within 2^32 of the largest valid one makes recovery refuse at the start",
          "[storage][ids]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  // Valid, but a job could run out of ids in 50 days at one per millisecond: refused now, not then.
  fs::create_directories(storage.checkpoint_dir(max_checkpoint_id - 27));
  sluice::test::stderr_capture log;
  const auto plan = sync_wait(plan_recovery(storage));
  REQUIRE_FALSE(plan);
  CHECK(plan.error().code() == std::errc::value_too_large);
  fs::remove_all(storage.checkpoint_dir(max_checkpoint_id - 27));
  fs::create_directories(storage.checkpoint_dir(max_checkpoint_id - (checkpoint_id{1} << 33)));
  const auto fine = sync_wait(plan_recovery(storage));
  REQUIRE(fine);
  CHECK(fine.value().next_checkpoint_id == max_checkpoint_id - (checkpoint_id{1} << 33) + 1);
}

TEST_CASE("at the largest valid id recovery refuses instead of wrapping, and no larger id is ever made",
          "[storage][ids]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  fs::create_directories(storage.checkpoint_dir(max_checkpoint_id));  // uncommitted, but its id is used
  sluice::test::stderr_capture log;
  const auto plan = sync_wait(plan_recovery(storage));
  REQUIRE_FALSE(plan);
  CHECK(plan.error().message() == "checkpoint directory '" + dir.path() +
                                      "': chk-4611686018427387904 leaves fewer than 2^32 checkpoint ids below the "
                                      "largest valid one (2^62); start with a new checkpoint directory");
  CHECK(plan.error().code() == std::errc::value_too_large);  // run_job: a refusal, exit code 2

  const auto made = sync_wait(storage.create_checkpoint_dir(max_checkpoint_id + 1));
  REQUIRE_FALSE(made);
  CHECK(made.error().message() == "mkdir '" + storage.checkpoint_dir(max_checkpoint_id + 1) +
                                      "': checkpoint id 4611686018427387905 is above the largest valid id "
                                      "4611686018427387904");
  CHECK_FALSE(fs::exists(storage.checkpoint_dir(max_checkpoint_id + 1)));
}

TEST_CASE("the report shows an impossible id by its name, with the reason, and null as its JSON id", "[report][ids]") {
  checkpoint_info bad;
  bad.name = "chk-007";
  bad.path = "/data/chk/chk-007";
  bad.fault = storage_errc::bad_name;
  bad.reason = "chk-007: not a checkpoint: the id has a leading zero";
  checkpoint_info good;
  good.id = 7;
  good.name = "chk-7";
  good.valid = true;
  good.has_manifest = true;
  const std::string table = format_table({bad, good}, 7);
  // Newest first; the bad name last.
  CHECK(table.find("chk-7 ") < table.find("chk-007 "));
  CHECK(table.find("invalid (bad-name): chk-007: not a checkpoint: the id has a leading zero") != std::string::npos);
  CHECK(format_json_line(bad, 7).starts_with("{\"id\":null,\"status\":\"invalid\",\"reason\":\"chk-007: not a "
                                             "checkpoint: the id has a leading zero\",\"fault\":\"bad-name\","));
}
