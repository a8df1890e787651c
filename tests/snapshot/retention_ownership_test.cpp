// Retention removes only what sluice made: a chk-<id> directory that is committed or carries the
// marker create_checkpoint_dir puts in it. A symlink named chk-<id> is never followed (not by
// retention, recovery or list()), and a directory sluice did not mark is left alone with a warning.

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_report.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>
#include <sluice/snapshot/recovery_plan.hpp>

#include <support/checkpoint_files.hpp>
#include <support/dir_files.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::test::make_checkpoint;
using sluice::test::read_text;
using sluice::test::temp_dir;

namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Warnings on, for the test's life.
struct warnings_on {
  warnings_on() : saved(sluice::runtime::log::level()) {
    if (!sluice::runtime::log::enabled(sluice::runtime::log_level::warn)) {
      sluice::runtime::log::set_level(sluice::runtime::log_level::warn);
    }
  }
  ~warnings_on() { sluice::runtime::log::set_level(saved); }
  sluice::runtime::log_level saved;
};

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("retention never follows a chk-N symlink and what it points to survives", "[storage][retention]") {
  temp_dir dir;
  fs::create_directories(dir.file("root"));
  checkpoint_storage storage(dir.file("root"), {.retained_checkpoints = 1});
  // Elsewhere: a committed checkpoint 1 of another root, and a directory of someone's files.
  checkpoint_storage elsewhere(dir.file("elsewhere"));
  make_checkpoint(elsewhere, 1);
  fs::create_directories(dir.file("victim"));
  write_text(dir.file("victim/precious.txt"), "keep me\n");
  write_text(dir.file("victim/_manifest"), "not ours\n");
  // chk-1 and chk-2 are symlinks to them, older than the root's own committed 3 and 4.
  fs::create_directory_symlink(elsewhere.checkpoint_dir(1), storage.checkpoint_dir(1));
  fs::create_directory_symlink(dir.file("victim"), storage.checkpoint_dir(2));
  make_checkpoint(storage, 3);
  make_checkpoint(storage, 4);

  for (const bool at_start : {true, false}) {
    auto report = sync_wait(storage.retain(no_checkpoint, at_start));
    REQUIRE(report.ok());
    CHECK(report->failures.empty());
  }
  CHECK(fs::is_symlink(storage.checkpoint_dir(1)));
  CHECK(fs::is_symlink(storage.checkpoint_dir(2)));
  CHECK_FALSE(fs::exists(storage.checkpoint_dir(3)));  // the root's own: removed as usual
  CHECK(fs::exists(storage.checkpoint_dir(4)));
  CHECK(read_text(dir.file("victim/precious.txt")) == "keep me\n");
  CHECK(read_text(dir.file("victim/_manifest")) == "not ours\n");
  CHECK(sync_wait(elsewhere.validate(1)).valid);  // every file of it still there

  // list() and `sluice checkpoints` say what they are, without reading through them.
  const auto listed = sync_wait(storage.list()).value();
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].id == 1);
  CHECK_FALSE(listed[0].valid);
  CHECK(listed[0].fault == storage_errc::not_a_directory);
  CHECK(format_status(listed[0]) ==
        "invalid (not-a-directory): chk-1: not a checkpoint: a symbolic link; ignored: never read through, never "
        "resumed from, never removed");
  CHECK(listed[1].id == 2);
  CHECK(listed[1].fault == storage_errc::not_a_directory);
  CHECK(listed[2].id == 4);
  CHECK(listed[2].valid);
  CHECK(resume_point(listed) == 4);
}

TEST_CASE("recovery never resumes through a chk-N symlink and the next id is above it", "[storage][recovery]") {
  temp_dir dir;
  checkpoint_storage storage(dir.file("root"));
  checkpoint_storage elsewhere(dir.file("elsewhere"));
  make_checkpoint(storage, 4);
  make_checkpoint(elsewhere, 9);  // valid there, and newer than anything in the root
  fs::create_directory_symlink(elsewhere.checkpoint_dir(9), storage.checkpoint_dir(9));

  warnings_on warn;
  sluice::test::stderr_capture log;
  const recovery_plan plan = sync_wait(plan_recovery(storage)).value();
  const std::string logged = log.text();
  CHECK(plan.recovered_id() == 4);
  CHECK(plan.next_checkpoint_id == 10);  // chk-9 cannot be made while the link is there
  REQUIRE(plan.ignored.size() == 1);
  CHECK(plan.ignored[0].name == "chk-9");
  CHECK(logged.find("ignoring '" + storage.checkpoint_dir(9) + "' (not-a-directory)") != std::string::npos);
}

TEST_CASE("an uncommitted directory without the marker is left alone with one warning and a marked one goes",
          "[storage][retention]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 1});
  // Someone's directory named like a checkpoint, with files and a subdirectory.
  fs::create_directories(storage.checkpoint_dir(2) + "/sub");
  write_text(storage.checkpoint_dir(2) + "/data.txt", "theirs\n");
  write_text(storage.checkpoint_dir(2) + "/task-0.state", "theirs too\n");
  // Sluice's own, uncommitted: aborted.
  sync_wait(storage.create_checkpoint_dir(3)).value();
  write_text(storage.checkpoint_dir(3) + "/task-0.state", "partial");
  for (checkpoint_id id : {4, 5}) make_checkpoint(storage, id);

  warnings_on warn;
  sluice::test::stderr_capture log;
  auto first = sync_wait(storage.retain(no_checkpoint)).value();
  auto second = sync_wait(storage.retain(no_checkpoint, true)).value();
  const std::string logged = log.text();
  CHECK(first.removed == std::vector<checkpoint_id>{3, 4});
  CHECK(first.left_alone == std::vector<checkpoint_id>{2});
  CHECK(first.failures.empty());
  CHECK(second.removed.empty());
  CHECK(second.left_alone == std::vector<checkpoint_id>{2});
  CHECK(read_text(storage.checkpoint_dir(2) + "/data.txt") == "theirs\n");
  CHECK(read_text(storage.checkpoint_dir(2) + "/task-0.state") == "theirs too\n");
  CHECK(fs::is_directory(storage.checkpoint_dir(2) + "/sub"));
  const std::string warning = fmt::format("'{}' is not removed: it holds no .sluice-checkpoint marker",
                                          storage.checkpoint_dir(2));
  CHECK(count_of(logged, warning) == 1);
}

TEST_CASE("an empty unmarked checkpoint directory is removed and a committed one without the marker too",
          "[storage][retention]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path(), {.retained_checkpoints = 1});
  fs::create_directories(storage.checkpoint_dir(1));  // what a crash between mkdir and the marker leaves
  make_checkpoint(storage, 2);
  fs::remove(fs::path(storage.checkpoint_dir(2)) / checkpoint_marker_file_name);  // made before markers
  make_checkpoint(storage, 3);

  auto report = sync_wait(storage.retain(no_checkpoint)).value();
  CHECK(report.removed == std::vector<checkpoint_id>{1, 2});
  CHECK(report.left_alone.empty());
  CHECK_FALSE(fs::exists(storage.checkpoint_dir(1)));
  CHECK_FALSE(fs::exists(storage.checkpoint_dir(2)));
  CHECK(fs::exists(storage.checkpoint_dir(3)));
}

TEST_CASE("create_checkpoint_dir marks the directory it makes and never one that was there", "[storage]") {
  temp_dir dir;
  checkpoint_storage storage(dir.file("root"));
  REQUIRE(sync_wait(storage.create_checkpoint_dir(1)).ok());  // the root made on the way
  CHECK(fs::is_regular_file(fs::path(storage.checkpoint_dir(1)) / checkpoint_marker_file_name));
  fs::create_directories(storage.checkpoint_dir(2));
  const auto again = sync_wait(storage.create_checkpoint_dir(2));
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code() == std::errc::file_exists);
  CHECK(fs::is_empty(storage.checkpoint_dir(2)));
}

TEST_CASE("discarding a prepared directory leaves one sluice did not mark", "[storage][retention]") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  fs::create_directories(storage.checkpoint_dir(7));
  write_text(storage.checkpoint_dir(7) + "/task-0.state", "theirs\n");
  const auto discarded = sync_wait(storage.discard_unused(7, {0}));
  REQUIRE_FALSE(discarded.ok());
  CHECK(discarded.error().code() == storage_errc::not_owned);
  CHECK(read_text(storage.checkpoint_dir(7) + "/task-0.state") == "theirs\n");

  sync_wait(storage.create_checkpoint_dir(8)).value();
  REQUIRE(sync_wait(storage.prepare_checkpoint(8, {0, 1})).ok());
  REQUIRE(sync_wait(storage.discard_unused(8, {0, 1})).ok());
  CHECK_FALSE(fs::exists(storage.checkpoint_dir(8)));
}
