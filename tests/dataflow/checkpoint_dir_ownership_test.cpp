// A job's checkpoint directory holds only what the job removes: a directory named chk-1000 that the
// job did not make survives its retention and its restarts, and an output directory inside the
// checkpoint directory (or the reverse, symlinks resolved) is refused at start, naming both.
#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <support/dir_files.hpp>
#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::read_text;
using sluice::test::temp_dir;

namespace fs = std::filesystem;

namespace {

// Numbers 0..count-1 at `rate` a second through two sink tasks into `out`.
job_result run_numbers(const std::string& out, const std::string& checkpoint_dir, std::uint64_t count,
                       std::vector<std::uint64_t>* ids = nullptr) {
  job_builder job("numbers");
  job.generate<std::uint64_t>("gen", 1, count, [](std::uint64_t n) { return n; }, 20'000)
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("sink", 2)
      .write_lines(out, [](const std::uint64_t& n) { return std::to_string(n); });
  job_settings settings = sluice::test::test_job_settings(checkpoint_dir, checkpoint_mode::unaligned, "local");
  if (ids != nullptr) settings.on_checkpoint = [ids](const sluice::snapshot::checkpoint_stats& c) { ids->push_back(c.id); };
  return run_job(job, settings);
}

std::vector<std::string> numbers(std::uint64_t count) {
  std::vector<std::string> out;
  for (std::uint64_t n = 0; n < count; ++n) out.push_back(std::to_string(n));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a foreign directory named chk-1000 with files survives the job's retention and restarts",
          "[dataflow][ownership][retention]") {
  temp_dir dir;
  const std::string chk = dir.file("chk");
  fs::create_directories(chk + "/chk-1000/nested");
  std::ofstream(chk + "/chk-1000/keep.txt") << "not sluice's\n";
  std::ofstream(chk + "/chk-1000/task-0.state") << "not sluice's either\n";

  std::vector<std::uint64_t> ids;
  const job_result first = run_numbers(dir.file("out"), chk, 2000, &ids);
  INFO(first.message);
  REQUIRE(first.exit_code == 0);
  REQUIRE(ids.size() >= 2);  // retention ran after each: chk-1000 was older than the newest committed
  CHECK(*std::min_element(ids.begin(), ids.end()) == 1001);
  for (int restart = 0; restart < 2; ++restart) {
    const job_result again = run_numbers(dir.file("out"), chk, 2000);
    INFO(again.message);
    CHECK(again.exit_code == 0);
  }
  CHECK(read_text(chk + "/chk-1000/keep.txt") == "not sluice's\n");
  CHECK(read_text(chk + "/chk-1000/task-0.state") == "not sluice's either\n");
  CHECK(fs::is_directory(chk + "/chk-1000/nested"));
  CHECK(sluice::test::published_lines(dir.file("out")) == numbers(2000));
}

TEST_CASE("an output directory inside the checkpoint directory is refused at start naming both",
          "[dataflow][ownership]") {
  temp_dir dir;
  const std::string chk = dir.file("chk");
  const job_result r = run_numbers(chk + "/chk-1000", chk, 10);
  CHECK(r.exit_code == 2);
  CHECK(r.message == "output directory '" + chk + "/chk-1000' ('" + fs::weakly_canonical(chk).string() +
                         "/chk-1000') is inside checkpoint directory '" + chk + "' ('" +
                         fs::weakly_canonical(chk).string() +
                         "'); give each a directory of its own, neither inside the other");
  CHECK_FALSE(fs::exists(chk));  // refused before anything was made
}

TEST_CASE("a checkpoint directory inside an output directory is refused at start naming both",
          "[dataflow][ownership]") {
  temp_dir dir;
  const std::string out = dir.file("out");
  const job_result r = run_numbers(out, out + "/state/chk", 10);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::StartsWith("checkpoint directory '" + out + "/state/chk' (") &&
                            Catch::Contains("is inside output directory '" + out + "' ("));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("nesting through a symlink is refused too once the link is resolved", "[dataflow][ownership]") {
  temp_dir dir;
  const std::string chk = dir.file("chk");
  fs::create_directories(chk + "/outputs");
  fs::create_directory_symlink(chk + "/outputs", dir.file("link"));
  const job_result r = run_numbers(dir.file("link") + "/words", chk, 10);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::StartsWith("output directory '" + dir.file("link") + "/words' ('" +
                                          fs::canonical(chk).string() + "/outputs/words') is inside checkpoint "
                                          "directory"));
  CHECK_FALSE(fs::exists(chk + "/outputs/words"));
  CHECK(fs::is_empty(chk + "/outputs"));
}

TEST_CASE("a dangling symlink as the output directory is refused naming the link and its target",
          "[dataflow][ownership]") {
  temp_dir dir;
  fs::create_symlink(dir.file("gone/out"), dir.file("out"));
  const job_result r = run_numbers(dir.file("out"), dir.file("chk"), 10);
  CHECK(r.exit_code == 2);
  CHECK(r.message == "create output directory '" + dir.file("out") + "': '" + dir.file("out") +
                         "' is a dangling symbolic link to '" + dir.file("gone/out") +
                         "' (its target does not exist); create the target or remove the link");
  CHECK(fs::is_symlink(dir.file("out")));
}
