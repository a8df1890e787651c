// The word-count job end to end: its published output equals a count computed here, in every
// checkpoint mode and over both transports; a run that resumes from a checkpoint ends the same.
#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::temp_dir;
using sluice::test::expected_counts;
using sluice::test::write_corpus_file;
using sluice::test::published_lines;

namespace {




job_result run_wordcount(const temp_dir& dir, checkpoint_mode mode, const std::string& transport, std::uint64_t window,
                         std::size_t parallelism = 2) {
  job_builder job("wordcount");
  build_wordcount(job, {dir.file("input.txt"), dir.file("out"), parallelism, window});
  return run_job(job, sluice::test::test_job_settings(dir.file("checkpoints"), mode, transport));
}

}  // namespace

TEST_CASE("word count equals an independent count, in every checkpoint mode and over both transports",
          "[dataflow][wordcount]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 20'000, 7);
  const job_result r = run_wordcount(dir, mode, transport, 0);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(r.resumed_from);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
  CHECK(r.final.checkpoints_completed >= 1);  // at least the final one
  // Quiescent at the end: every segment home, no buffer recycled twice, every gate's credit identity.
  CHECK(r.leaked_segments == 0);
  CHECK(r.buffer_violations == 0);
  CHECK(r.credit_violation.empty());
}

TEST_CASE("windowed word count gives each tumbling window of lines its counts", "[dataflow][wordcount]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 5'000, 11);
  const job_result r = run_wordcount(dir, checkpoint_mode::unaligned, "local", 1000, 3);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 1000));
}

TEST_CASE("a second run over a finished job resumes from its final checkpoint and changes nothing",
          "[dataflow][wordcount]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 3'000, 3);
  const job_result first = run_wordcount(dir, checkpoint_mode::aligned, "local", 0);
  REQUIRE(first.exit_code == 0);
  const job_result second = run_wordcount(dir, checkpoint_mode::aligned, "local", 0);
  INFO(second.message);
  REQUIRE(second.exit_code == 0);
  CHECK(second.resumed_from.has_value());
  CHECK(published_lines(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}

TEST_CASE("an operator that throws fails the job with a message naming the task and the cause", "[dataflow]") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 5'000, 3);
  job_builder job("failing");
  job.read_lines("read", dir.file("input.txt"), 2)
      .map<std::string>([](const std::string& line) -> std::string {
        if (line.find("water") != std::string::npos) throw std::runtime_error("no water allowed");
        return line;
      })
      .key_by<std::string>([](const std::string& l) { return l; })
      .aggregate<std::uint64_t, std::string>(
          "count", 2, [](std::uint64_t& n, const std::string&) { ++n; },
          [](const std::string& l, const std::uint64_t& n) { return l + " " + std::to_string(n); })
      .write_lines(dir.file("out"), [](const std::string& s) { return s; });
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.handle_signals = false;
  const job_result r = run_job(job, settings);
  CHECK(r.exit_code == 1);
  CHECK(r.message.find("read#") != std::string::npos);
  CHECK(r.message.find("no water allowed") != std::string::npos);
  CHECK(published_lines(dir.file("out")).empty());  // nothing was published: no checkpoint completed
}

TEST_CASE("a missing input file fails the job with the path in the message", "[dataflow]") {
  temp_dir dir;
  job_builder job("missing");
  build_wordcount(job, {dir.file("nope.txt"), dir.file("out"), 1, 0});
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.handle_signals = false;
  const job_result r = run_job(job, settings);
  CHECK(r.exit_code == 1);
  CHECK(r.message.find("nope.txt") != std::string::npos);
}
