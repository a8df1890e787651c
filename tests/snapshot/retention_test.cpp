#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <support/checkpoint_files.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::test::make_checkpoint;
using sluice::test::temp_dir;

namespace {

bool exists(const checkpoint_storage& storage, checkpoint_id id) {
  return std::filesystem::exists(storage.checkpoint_dir(id));
}

// An uncommitted directory: a partial state file, as an aborted or crashed writer leaves it.
void make_uncommitted(checkpoint_storage& storage, checkpoint_id id) {
  sync_wait(storage.create_checkpoint_dir(id)).value();
  auto partial = sluice::test::sample_task_file(id, 0);
  partial.erase(partial.begin() + 100, partial.end());
  sluice::test::write_bytes(storage.state_file_path(id, 0), partial);
}

}  // namespace

TEST_CASE("retention keeps the newest K committed checkpoints and removes older and aborted ones") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 3});
  for (checkpoint_id id : {1, 2, 4, 5, 6}) make_checkpoint(storage, id);
  make_uncommitted(storage, 3);  // aborted
  make_uncommitted(storage, 7);  // being written now
  make_uncommitted(storage, 8);  // newer than any committed one: its writer may still be running
  std::filesystem::create_directories(dir.file("not-a-checkpoint"));

  auto report = sync_wait(storage.retain(7));
  REQUIRE(report.ok());
  CHECK(report->kept == std::vector<checkpoint_id>{6, 5, 4});
  CHECK(report->removed == std::vector<checkpoint_id>{1, 2, 3});
  CHECK(report->failures.empty());
  for (checkpoint_id id : {1, 2, 3}) CHECK_FALSE(exists(storage, id));
  for (checkpoint_id id : {4, 5, 6, 7, 8}) CHECK(exists(storage, id));
  CHECK(std::filesystem::exists(dir.file("not-a-checkpoint")));
  CHECK(std::filesystem::exists(storage.state_file_path(7, 0)));

  // The kept ones still validate.
  const auto listed = sync_wait(storage.list()).value();
  REQUIRE(listed.size() == 5);
  CHECK(listed[0].id == 4);
  CHECK(listed[0].valid);
  CHECK(listed[2].valid);
}

TEST_CASE("retention never removes the in-progress checkpoint, even one older than every kept one") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 1});
  make_uncommitted(storage, 1);
  for (checkpoint_id id : {2, 3, 4}) make_checkpoint(storage, id, 1);

  auto report = sync_wait(storage.retain(1)).value();
  CHECK(report.kept == std::vector<checkpoint_id>{4});
  CHECK(report.removed == std::vector<checkpoint_id>{2, 3});
  CHECK(exists(storage, 1));
  CHECK(exists(storage, 4));
}

TEST_CASE("a committed in-progress checkpoint counts toward K but is never removed") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 2});
  for (checkpoint_id id : {1, 2, 3}) make_checkpoint(storage, id, 1);
  auto report = sync_wait(storage.retain(3)).value();
  CHECK(report.kept == std::vector<checkpoint_id>{3, 2});
  CHECK(report.removed == std::vector<checkpoint_id>{1});
}

TEST_CASE("retention removes a committed checkpoint holding files its manifest does not list") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 1});
  make_checkpoint(storage, 1);
  sluice::test::write_bytes(storage.checkpoint_dir(1) + "/stray", sluice::test::bytes_of("x"));
  sluice::test::write_bytes(storage.checkpoint_dir(1) + "/_manifest.tmp", sluice::test::bytes_of("y"));
  make_checkpoint(storage, 2);

  auto report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.removed == std::vector<checkpoint_id>{1});
  CHECK_FALSE(exists(storage, 1));
}

TEST_CASE("retention with nothing committed removes nothing") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_uncommitted(storage, 1);
  make_uncommitted(storage, 2);
  auto report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.kept.empty());
  CHECK(report.removed.empty());
  CHECK(exists(storage, 1));
  CHECK(exists(storage, 2));
}

TEST_CASE("a failed removal is reported and left for the next pass") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 1});
  make_uncommitted(storage, 1);
  std::filesystem::create_directories(storage.checkpoint_dir(1) + "/subdir/x");  // unlink cannot remove it
  make_checkpoint(storage, 2, 1);

  auto report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.removed.empty());
  REQUIRE(report.failures.size() == 1);
  CHECK_THAT(report.failures[0], Catch::StartsWith("unlink '" + storage.checkpoint_dir(1) + "/"));
  CHECK(exists(storage, 2));
}

TEST_CASE("retention at start removes every uncommitted directory but the newest, and never the resumed one") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 2});
  for (checkpoint_id id : {1, 2, 3}) make_checkpoint(storage, id);
  // A job whose checkpoints kept failing (a full disk) left these behind, newer than any committed.
  for (checkpoint_id id : {4, 5, 6, 7}) make_uncommitted(storage, id);

  auto report = sync_wait(storage.retain(1, /*at_start=*/true)).value();  // resuming from 1
  CHECK(report.kept == std::vector<checkpoint_id>{3, 2});
  CHECK(report.removed == std::vector<checkpoint_id>{4, 5, 6});
  for (checkpoint_id id : {1, 2, 3, 7}) CHECK(exists(storage, id));  // 7: the next id continues after it
  for (checkpoint_id id : {4, 5, 6}) CHECK_FALSE(exists(storage, id));

  // Nothing committed at all: the same, and the next id still continues after the newest.
  temp_dir other;
  checkpoint_storage fresh(other.path());
  for (checkpoint_id id : {1, 2, 3}) make_uncommitted(fresh, id);
  auto none = sync_wait(fresh.retain(no_checkpoint, true)).value();
  CHECK(none.removed == std::vector<checkpoint_id>{1, 2});
  CHECK(exists(fresh, 3));
}
