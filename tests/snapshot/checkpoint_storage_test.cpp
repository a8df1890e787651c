#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/system.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <support/backends.hpp>
#include <support/checkpoint_files.hpp>
#include <support/recording_system.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>

using namespace sluice::snapshot;
using sluice::runtime::sync_wait;
using sluice::test::make_checkpoint;
using sluice::test::pattern_bytes;
using sluice::test::read_bytes;
using sluice::test::sample_task_file;
using sluice::test::temp_dir;
using sluice::test::write_bytes;

namespace {

// Commits chk-1 and chk-2, damages chk-2 with `damage`, and returns what recovery chooses.
template <class Damage>
recovery_choice choose_after(checkpoint_storage& storage, Damage damage) {
  make_checkpoint(storage, 1);
  make_checkpoint(storage, 2);
  damage(storage);
  return sync_wait(storage.newest_valid()).value();
}

std::string task1(const checkpoint_storage& storage) { return storage.state_file_path(2, 1); }

}  // namespace

TEST_CASE("a committed checkpoint lists as valid, is chosen for recovery and loads back byte for byte") {
  const auto kind = GENERATE(sluice::test::backend_kind::uring, sluice::test::backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  checkpoint_storage storage(dir.file("checkpoints"));  // the root does not exist yet
  REQUIRE(sync_wait(storage.create_checkpoint_dir(5), sluice::test::backend_options(kind)).ok());
  write_bytes(storage.state_file_path(5, 0), sample_task_file(5, 0));
  write_bytes(storage.state_file_path(5, 1), sample_task_file(5, 1));
  auto committed = sync_wait(
      storage.commit_verified(5, checkpoint_mode::aligned_timeout, {0, 1}, {{"job", sluice::test::bytes_of("wc")}}),
      sluice::test::backend_options(kind));
  REQUIRE(committed.ok());
  CHECK(committed->files[0] == manifest_file{"task-0.state", 5448, sluice::buffers::crc32c(sample_task_file(5, 0)), 4, 5300});

  const auto text = read_bytes(dir.file("checkpoints/chk-5/_manifest"));
  CHECK(std::string(reinterpret_cast<const char*>(text.data()), 38) == "sluice-manifest 1\ncheckpoint 5\nmode al");
  CHECK_FALSE(std::filesystem::exists(dir.file("checkpoints/chk-5/_manifest.tmp")));

  auto listed = sync_wait(storage.list(), sluice::test::backend_options(kind));
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 1);
  const checkpoint_info& info = listed->front();
  CHECK(info.id == 5);
  CHECK(info.valid);
  CHECK(info.reason.empty());
  CHECK(info.mode == checkpoint_mode::aligned_timeout);
  CHECK(info.tasks == 2);
  CHECK(info.size_bytes == 2 * 5448);
  CHECK(info.operator_state_bytes == 8);
  CHECK(info.channel_state_bytes == 2 * 5300);
  CHECK(info.created_unix_ms > 0);

  auto choice = sync_wait(storage.newest_valid(), sluice::test::backend_options(kind));
  REQUIRE(choice.ok());
  REQUIRE(choice->chosen.has_value());
  CHECK(choice->chosen->id == 5);
  CHECK(choice->skipped.empty());

  auto loaded = sync_wait(storage.load(5), sluice::test::backend_options(kind));
  REQUIRE(loaded.ok());
  CHECK(loaded->manifest == committed.value());
  REQUIRE(loaded->tasks.size() == 2);
  for (task_id t = 0; t < 2; ++t) {
    const task_state& s = loaded->tasks[t];
    CHECK(s.summary.task == t);
    CHECK(s.operator_state.at(0) == sluice::test::bytes_of("op-" + std::to_string(t)));
    CHECK(s.input_channels.at({0, 0}) == pattern_bytes(5000, 10 * t + 1));
    CHECK(s.output_channels.at({0, 1}) == pattern_bytes(300, 10 * t + 2));
  }
}

TEST_CASE("an empty or missing root has no checkpoints to recover") {
  temp_dir dir;
  checkpoint_storage storage(dir.file("nothing-here"));
  CHECK(sync_wait(storage.list()).value().empty());
  CHECK_FALSE(sync_wait(storage.newest_valid()).value().chosen.has_value());
}

TEST_CASE("only directories named chk-<id> count as checkpoints") {
  CHECK(checkpoint_storage::parse_dir_name("chk-7") == checkpoint_id{7});
  CHECK(checkpoint_storage::parse_dir_name("chk-4611686018427387904") == checkpoint_id{4611686018427387904ull});
  for (const char* name : {"chk-0", "chk-007", "chk-", "chk-7x", "chk--7", "chk-4611686018427387905",
                           "chk-18446744073709551615", "chk-18446744073709551616", "task-7", "_manifest"}) {
    INFO(name);
    CHECK_FALSE(checkpoint_storage::parse_dir_name(name).has_value());
  }
}

TEST_CASE("recovery skips a checkpoint with a truncated state file and says where it was cut") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto choice = choose_after(storage, [](checkpoint_storage& s) {
    REQUIRE(::truncate(task1(s).c_str(), sluice::test::sample_record1_payload_offset + 100) == 0);
  });
  REQUIRE(choice.chosen.has_value());
  CHECK(choice.chosen->id == 1);
  REQUIRE(choice.skipped.size() == 1);
  CHECK(choice.skipped[0].id == 2);
  CHECK(choice.skipped[0].fault == storage_errc::truncated);
  CHECK(choice.skipped[0].reason == "chk-2/task-1.state: truncated: record 1 payload needs 5000 bytes, 100 remain");
}

TEST_CASE("recovery skips a checkpoint with a flipped payload byte as a bad checksum in that record") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto choice = choose_after(storage, [](checkpoint_storage& s) {
    auto bytes = read_bytes(task1(s));
    bytes[sluice::test::sample_record1_payload_offset + 10] ^= std::byte{1};
    write_bytes(task1(s), bytes);
  });
  CHECK(choice.chosen->id == 1);
  CHECK(choice.skipped.at(0).fault == storage_errc::bad_checksum);
  CHECK(choice.skipped.at(0).reason == "chk-2/task-1.state: bad checksum in record 1 (input channel payload, 5000 bytes)");
}

TEST_CASE("recovery skips a checkpoint whose state file is missing") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto choice = choose_after(storage, [](checkpoint_storage& s) { REQUIRE(::unlink(task1(s).c_str()) == 0); });
  CHECK(choice.chosen->id == 1);
  CHECK(choice.skipped.at(0).fault == storage_errc::missing_file);
  CHECK(choice.skipped.at(0).reason == "chk-2/task-1.state: missing state file: open '" + task1(storage) +
                                           "': No such file or directory");
  CHECK(choice.skipped.at(0).has_manifest);
  CHECK(choice.skipped.at(0).tasks == 2);
}

TEST_CASE("recovery skips a checkpoint without a manifest as never committed") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto choice = choose_after(storage, [](checkpoint_storage& s) {
    REQUIRE(::unlink((s.checkpoint_dir(2) + "/_manifest").c_str()) == 0);
  });
  CHECK(choice.chosen->id == 1);
  CHECK(choice.skipped.at(0).fault == storage_errc::missing_manifest);
  CHECK(choice.skipped.at(0).reason == "open checkpoint manifest '" + storage.checkpoint_dir(2) +
                                           "/_manifest': No such file or directory (never committed: aborted, or "
                                           "still being written)");
  CHECK_FALSE(choice.skipped.at(0).has_manifest);
}

TEST_CASE("recovery skips a checkpoint whose manifest is corrupt") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto choice = choose_after(storage, [](checkpoint_storage& s) {
    const std::string path = s.checkpoint_dir(2) + "/_manifest";
    auto bytes = read_bytes(path);
    bytes[20] ^= std::byte{1};  // inside "checkpoint 2"
    write_bytes(path, bytes);
  });
  CHECK(choice.chosen->id == 1);
  CHECK(choice.skipped.at(0).fault == storage_errc::bad_manifest);
  CHECK_THAT(choice.skipped.at(0).reason, Catch::StartsWith("chk-2/_manifest: bad checksum (the end line says "));
}

TEST_CASE("recovery skips a checkpoint with bytes after a state file's end record") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  const auto choice = choose_after(storage, [](checkpoint_storage& s) {
    auto bytes = read_bytes(task1(s));
    bytes.insert(bytes.end(), 3, std::byte{0});
    write_bytes(task1(s), bytes);
  });
  CHECK(choice.chosen->id == 1);
  CHECK(choice.skipped.at(0).fault == storage_errc::bad_format);
  CHECK(choice.skipped.at(0).reason == "chk-2/task-1.state: 3 bytes after the end record");
}

TEST_CASE("recovery skips a checkpoint whose manifest disagrees with a file's size or checksum") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  SECTION("size") {
    const auto choice = choose_after(storage, [](checkpoint_storage& s) {
      auto m = sync_wait(s.load(2)).value().manifest;
      m.files[1].size_bytes += 1;
      sync_wait(s.commit_manifest(m)).value();  // a manifest that lies about the size
    });
    CHECK(choice.chosen->id == 1);
    CHECK(choice.skipped.at(0).fault == storage_errc::size_mismatch);
    CHECK(choice.skipped.at(0).reason ==
          "chk-2/task-1.state: size mismatch: the manifest says 5449 bytes, the file has 5448");
  }
  SECTION("checksum") {
    // A well-formed file of the same size but other bytes, as if swapped in from elsewhere.
    const auto choice = choose_after(storage, [](checkpoint_storage& s) {
      write_bytes(task1(s), sample_task_file(2, 1, /*seed=*/7));
    });
    CHECK(choice.chosen->id == 1);
    CHECK(choice.skipped.at(0).fault == storage_errc::bad_checksum);
    CHECK_THAT(choice.skipped.at(0).reason,
               Catch::StartsWith("chk-2/task-1.state: bad checksum: the manifest says CRC32C "));
  }
}

TEST_CASE("recovery falls back past every corrupt newer checkpoint and logs why for each") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_checkpoint(storage, 3);
  make_checkpoint(storage, 4);
  make_checkpoint(storage, 6);
  REQUIRE(::truncate(storage.state_file_path(6, 0).c_str(), 40) == 0);
  REQUIRE(::unlink((storage.checkpoint_dir(4) + "/_manifest").c_str()) == 0);

  sluice::test::stderr_capture captured;
  const auto choice = sync_wait(storage.newest_valid()).value();
  const std::string log = captured.text();
  REQUIRE(choice.chosen.has_value());
  CHECK(choice.chosen->id == 3);
  REQUIRE(choice.skipped.size() == 2);
  CHECK(choice.skipped[0].id == 6);
  CHECK(choice.skipped[1].id == 4);
  CHECK_THAT(log, Catch::Contains("recovery: skipping checkpoint 6 (truncated): chk-6/task-0.state: truncated: "
                                  "record 0 header needs 24 bytes, 8 remain"));
  CHECK_THAT(log, Catch::Contains("recovery: skipping checkpoint 4 (missing-manifest): open checkpoint manifest '" +
                                  storage.checkpoint_dir(4) + "/_manifest': No such file or directory"));

  auto listed = sync_wait(storage.list()).value();
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].valid);
  CHECK_FALSE(listed[1].valid);
  CHECK_FALSE(listed[2].valid);
  auto load = sync_wait(storage.load(6));
  REQUIRE_FALSE(load.ok());
  CHECK(load.error().code() == storage_errc::truncated);
}

TEST_CASE("no valid checkpoint means recovery has nothing to choose") {
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  make_checkpoint(storage, 1);
  REQUIRE(::unlink(storage.state_file_path(1, 0).c_str()) == 0);
  const auto choice = sync_wait(storage.newest_valid()).value();
  CHECK_FALSE(choice.chosen.has_value());
  CHECK(choice.skipped.size() == 1);
}

TEST_CASE("a manifest records its creation time from the thread's system's wall clock") {
  struct fixed_clock : sluice::test::recording_system {
    std::chrono::system_clock::time_point wall_now() noexcept override {
      note("wall_now");
      return std::chrono::system_clock::time_point(std::chrono::milliseconds(1712000000123));
    }
  } os;
  temp_dir dir;
  checkpoint_storage storage(dir.path());
  {
    sluice::runtime::system_scope scope(os);
    make_checkpoint(storage, 3);
  }
  CHECK(os.count("wall_now") == 1);
  const auto listed = sync_wait(storage.list()).value();
  REQUIRE(listed.size() == 1);
  CHECK(listed.front().created_unix_ms == 1712000000123);
}
