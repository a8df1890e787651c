// Exactly once under crashes: the word-count job runs in a child process that is killed with
// SIGKILL at random moments (during processing, checkpoint writes, commits, the final checkpoint),
// then started again with the same arguments, until one run finishes. The published output must
// equal an uninterrupted run's, for every checkpoint mode and both transports. The window join (two
// inputs, one gate) gets the same treatment.
#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>

#include <support/temp_dir.hpp>

#include "crash_support.hpp"
#include "join_support.hpp"
#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::temp_dir;
using sluice::test::expected_counts;
using sluice::test::write_corpus_file;
using sluice::test::published_lines;
using sluice::test::nested_loop_join;
using sluice::test::write_join_file;
using sluice::test::crash_report;

namespace {




enum class sample { wordcount, join };

std::function<int()> job_of(const temp_dir& dir, checkpoint_mode mode, const std::string& transport, sample which) {
  return [&dir, mode, transport, which] {
    job_builder job(which == sample::join ? "join" : "wordcount");
    if (which == sample::join) {
      build_join(job, {dir.file("left.csv"), dir.file("right.csv"), dir.file("out"), 2, 500, {}});
    } else {
      build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, 0});
    }
    job_settings settings;
    settings.checkpoint_dir = dir.file("checkpoints");
    settings.checkpoint_interval = std::chrono::milliseconds(10);
    settings.mode = mode;
    settings.alignment_timeout = std::chrono::milliseconds(2);
    settings.transport = *sluice::dataflow::parse_transport(transport);
    settings.handle_signals = false;
    return run_job(job, settings).exit_code;
  };
}

crash_report run_until_done(const temp_dir& dir, checkpoint_mode mode, const std::string& transport,
                            std::uint64_t seed, sample which = sample::wordcount) {
  const auto reset = [&dir] {
    std::filesystem::remove_all(dir.file("out"));
    std::filesystem::remove_all(dir.file("checkpoints"));
  };
  return sluice::test::run_until_done(job_of(dir, mode, transport, which), reset, seed);
}

}  // namespace

TEST_CASE("word count killed with SIGKILL at random moments and restarted publishes exactly the uninterrupted result",
          "[dataflow][crash]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 60'000, 5);
  const crash_report report =
      run_until_done(dir, mode, transport, 17 + static_cast<std::uint64_t>(mode) * 3 + (transport == "tcp"));
  INFO("killed " << report.kills << " times");
  REQUIRE(report.exit_code == 0);
  CHECK(report.kills > 0);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}

// A key space of a service, not a vocabulary: ~100 k distinct words, so each snapshot's table is
// written in many slices while the task goes on (and is killed meanwhile).
TEST_CASE("word count over 100 thousand distinct keys killed with SIGKILL at random moments publishes exactly the count",
          "[dataflow][crash][state]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  INFO("mode " << sluice::snapshot::to_string(mode));
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 60'000, 8, 100'000);
  const crash_report report = run_until_done(dir, mode, "local", 71 + static_cast<std::uint64_t>(mode));
  INFO("killed " << report.kills << " times");
  REQUIRE(report.exit_code == 0);
  CHECK(report.kills > 0);
  const std::vector<std::string> expected = expected_counts(dir.file("input.txt"), 0);
  CHECK(expected.size() > 90'000);
  CHECK(published_lines(dir.file("out")) == expected);
}

TEST_CASE("the window join killed with SIGKILL at random moments and restarted publishes exactly the nested-loop join",
          "[dataflow][crash][join]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  write_join_file(dir.file("left.csv"), 12'000, 100, 60'000, 5, "L");
  write_join_file(dir.file("right.csv"), 12'000, 100, 60'000, 6, "R");
  const crash_report report = run_until_done(dir, mode, transport,
                                             41 + static_cast<std::uint64_t>(mode) * 5 + (transport == "tcp"), sample::join);
  INFO("killed " << report.kills << " times");
  REQUIRE(report.exit_code == 0);
  CHECK(report.kills > 0);
  CHECK(published_lines(dir.file("out")) == nested_loop_join(dir.file("left.csv"), dir.file("right.csv"), 500));
}

TEST_CASE("resuming from an unaligned checkpoint that holds in-flight channel state replays it: exact output",
          "[dataflow][crash]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 200'000, 9);
  const std::filesystem::path chk_root = dir.file("checkpoints");
  // Run until a committed checkpoint holds channel state, kill the job there, make it the newest.
  const auto reset = [&dir] {
    std::filesystem::remove_all(dir.file("checkpoints"));
    std::filesystem::remove_all(dir.file("out"));
  };
  const std::filesystem::path with_state =
      sluice::test::kill_at_channel_state(job_of(dir, checkpoint_mode::unaligned, "local", sample::wordcount), chk_root, reset, 10);
  REQUIRE_FALSE(with_state.empty());
  const std::string keep = with_state.filename().string();
  INFO("resuming from " << keep << " with " << sluice::test::manifest_channel_bytes(with_state) << " bytes of channel state");
  const crash_report report = run_until_done(dir, checkpoint_mode::unaligned, "local", 99);
  REQUIRE(report.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}
