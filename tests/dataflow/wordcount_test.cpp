// The word-count job end to end: its published output equals a count computed here, in every
// checkpoint mode and over both transports; a run that resumes from a checkpoint ends the same.
#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>

#include <support/temp_dir.hpp>

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

namespace {

// A corpus of `lines` generated lines (seeded), written with plain streams (the test's own I/O).
void write_lines(const std::string& path, std::uint64_t lines, std::uint64_t seed) {
  word_corpus_generator gen(seed);
  std::ofstream out(path);
  for (std::uint64_t i = 0; i < lines; ++i) out << gen.next_line() << '\n';
}

// The expected output, computed independently: sorted "word count" (or "start word count") lines.
std::vector<std::string> expected_counts(const std::string& path, std::uint64_t window) {
  std::ifstream in(path);
  std::map<std::pair<std::uint64_t, std::string>, std::uint64_t> counts;
  std::string line;
  std::uint64_t index = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string w;
    while (words >> w) ++counts[{window ? index - index % window : 0, w}];
    ++index;
  }
  std::vector<std::string> out;
  for (const auto& [key, n] : counts) {
    out.push_back(window ? std::to_string(key.first) + " " + key.second + " " + std::to_string(n)
                         : key.second + " " + std::to_string(n));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every line of the published files (names not starting with '.' or '_'), sorted.
std::vector<std::string> published(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || name[0] == '_') continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
  }
  std::sort(out.begin(), out.end());
  return out;
}

job_result run_wordcount(const temp_dir& dir, checkpoint_mode mode, const std::string& transport, std::uint64_t window,
                         std::size_t parallelism = 2) {
  job_builder job("wordcount");
  build_wordcount(job, {dir.file("input.txt"), dir.file("out"), parallelism, window});
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.checkpoint_interval = std::chrono::milliseconds(20);
  settings.mode = mode;
  settings.alignment_timeout = std::chrono::milliseconds(1);
  settings.transport = transport;
  settings.handle_signals = false;
  return run_job(job, settings);
}

}  // namespace

TEST_CASE("word count equals an independent count, in every checkpoint mode and over both transports",
          "[dataflow][wordcount]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  write_lines(dir.file("input.txt"), 20'000, 7);
  const job_result r = run_wordcount(dir, mode, transport, 0);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(r.resumed_from);
  CHECK(published(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
  CHECK(r.final.checkpoints_completed >= 1);  // at least the final one
}

TEST_CASE("windowed word count gives each tumbling window of lines its counts", "[dataflow][wordcount]") {
  temp_dir dir;
  write_lines(dir.file("input.txt"), 5'000, 11);
  const job_result r = run_wordcount(dir, checkpoint_mode::unaligned, "local", 1000, 3);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published(dir.file("out")) == expected_counts(dir.file("input.txt"), 1000));
}

TEST_CASE("a second run over a finished job resumes from its final checkpoint and changes nothing",
          "[dataflow][wordcount]") {
  temp_dir dir;
  write_lines(dir.file("input.txt"), 3'000, 3);
  const job_result first = run_wordcount(dir, checkpoint_mode::aligned, "local", 0);
  REQUIRE(first.exit_code == 0);
  const job_result second = run_wordcount(dir, checkpoint_mode::aligned, "local", 0);
  INFO(second.message);
  REQUIRE(second.exit_code == 0);
  CHECK(second.resumed_from.has_value());
  CHECK(published(dir.file("out")) == expected_counts(dir.file("input.txt"), 0));
}
