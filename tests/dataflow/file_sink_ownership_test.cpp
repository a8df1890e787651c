// exactly_once_file_sink keeps to its own files: recovery deletes only what it can prove it wrote
// (its staging area, and published files below its high-water mark), and a file named like its
// output that it did not write fails recovery instead of being deleted or overwritten.
#include <sluice/dataflow/exactly_once_file_sink.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/dir_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using sluice::dataflow::exactly_once_file_sink;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::snapshot::checkpoint_id;
using sluice::test::names_in;
using sluice::test::read_text;
using sluice::test::temp_dir;
using sink = exactly_once_file_sink;

namespace {

// Every file of `dir` (not in subdirectories) with its content.
std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) out[entry.path().filename().string()] = read_text(entry.path().string());
  }
  return out;
}

// One life of sink task `task` in `dir`: recovers from `state`, then for each batch writes its
// lines, snapshots (checkpoint 1, 2, ...) and commits. Returns the state of the last snapshot.
task<std::vector<std::byte>> life(std::string dir, sluice::snapshot::task_id task_id, std::vector<std::byte> state,
                                  std::vector<std::vector<std::string>> batches) {
  sink k(dir, task_id);
  auto recovered = co_await k.recover(state);
  recovered.value();
  std::vector<std::byte> last = state;
  checkpoint_id id = 0;
  for (const auto& batch : batches) {
    for (const auto& line : batch) {
      auto written = co_await k.write(line);
      written.value();
    }
    auto snapshot = co_await k.snapshot(++id);
    last = std::move(snapshot).value();
    auto committed = co_await k.commit(id);
    committed.value();
  }
  co_await k.close();
  co_return last;
}

task<std::string> recover_error(std::string dir, sluice::snapshot::task_id task_id, std::vector<std::byte> state) {
  sink k(dir, task_id);
  auto recovered = co_await k.recover(state);
  co_await k.close();
  co_return recovered ? std::string() : recovered.error().message();
}

}  // namespace

TEST_CASE("a fresh sink never deletes or changes files it did not write, whatever their names", "[file_sink][ownership]") {
  temp_dir dir;
  // Files a user (or an older sluice) left: hand-made names, the old hidden staging name, another
  // task's output.
  for (const char* name : {"notes.txt", "part-4-3", ".staging-00004-000000000000", "part-00005-000000000000",
                           "part-00004-extra"}) {
    std::ofstream(dir.file(name)) << "user file " << name << "\n";
  }
  const auto before = files_of(dir.path());
  sync_wait(life(dir.path(), 4, {}, {{"a", "b"}, {"c"}}));
  auto after = files_of(dir.path());
  CHECK(read_text(dir.file("part-00004-000000000000")) == "a\nb\n");
  CHECK(read_text(dir.file("part-00004-000000000001")) == "c\n");
  after.erase("part-00004-000000000000");
  after.erase("part-00004-000000000001");
  CHECK(after == before);
}

TEST_CASE("a file named like the sink's next output that it did not write fails recovery, untouched",
          "[file_sink][ownership]") {
  temp_dir dir;
  SECTION("a fresh start in a directory that holds it") {
    std::ofstream(dir.file("part-00004-000000000099")) << "mine\n";
    const std::string error = sync_wait(recover_error(dir.path(), 4, {}));
    CHECK(error == "recover file sink task 4 in '" + dir.path() +
                       "': 'part-00004-000000000099' is in the way of this sink's output and was not written by it "
                       "(task 4 wrote sequence numbers below 0 only); move it out of the output directory");
    CHECK(read_text(dir.file("part-00004-000000000099")) == "mine\n");
  }
  SECTION("a resume, with the file above the sink's high-water mark") {
    const auto state = sync_wait(life(dir.path(), 4, {}, {{"one"}, {"two"}}));
    std::ofstream(dir.file("part-00004-000000000005")) << "mine\n";
    const auto before = names_in(dir.path());
    const std::string error = sync_wait(recover_error(dir.path(), 4, state));
    CHECK(error.find("'part-00004-000000000005' is in the way of this sink's output and was not written by it (task 4 "
                     "wrote sequence numbers below 2 only)") != std::string::npos);
    // Nothing changed: the check comes before any rename or removal.
    CHECK(names_in(dir.path()) == before);
    CHECK(read_text(dir.file("part-00004-000000000005")) == "mine\n");
    CHECK(read_text(dir.file("part-00004-000000000001")) == "two\n");
  }
}

TEST_CASE("recovery from an older state removes the sink's newer output, below its high-water mark only",
          "[file_sink][ownership]") {
  temp_dir dir;
  const auto first = sync_wait(life(dir.path(), 2, {}, {{"one"}}));
  sync_wait(life(dir.path(), 2, first, {{"two"}, {"three"}}));  // publishes 1 and 2; the mark is 3
  CHECK(names_in(dir.path() + "/.sluice-staging") == std::vector<std::string>{"next-00002-000000000003"});
  std::ofstream(dir.file("part-00002-notes")) << "mine\n";

  // Back to the first state (as when recovery falls back to an older checkpoint): 1 and 2 go, as
  // the replay writes them again; the user's file stays.
  sync_wait(life(dir.path(), 2, first, {{"two again"}}));
  CHECK(read_text(dir.file("part-00002-000000000000")) == "one\n");
  CHECK(read_text(dir.file("part-00002-000000000001")) == "two again\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("part-00002-000000000002")));
  CHECK(read_text(dir.file("part-00002-notes")) == "mine\n");
  // The mark never goes down: the removed sequence number 2 is still known as the sink's.
  CHECK(names_in(dir.path() + "/.sluice-staging") == std::vector<std::string>{"next-00002-000000000003"});
}
