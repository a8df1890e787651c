// An input file that changes under a running job (issue 33): the job reads each input as its
// fingerprint recorded it (size and CRC32C, taken before the engine starts), so a file truncated or
// appended to while it is read, or changed between the fingerprint and the readers' open, fails the
// job (exit code 1) naming the file and both sizes: never exit 0 with counts of neither version.
// The change is made by the job itself, at a moment it cannot miss: an operator right after the
// source changes the file when the first line reaches it (the reader has read one 64 KiB chunk of a
// file of several), or the job's on_ready callback (no reader has opened the file yet).

#include <sluice/dataflow/job_runner.hpp>

#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::temp_dir;

namespace fs = std::filesystem;

namespace {

constexpr std::size_t indexed = 0;  // a parallelism of run_copy: read_indexed_lines (one task)

// The lines of `input` copied into `out` by `parallelism` tasks of read_lines (or by
// read_indexed_lines); `at_first_line` runs once, when the first line reaches the operator after a
// source (on that task's executor), `on_ready` as the job is about to run.
job_result run_copy(const temp_dir& dir, const std::string& input, std::size_t parallelism,
                    std::function<void()> at_first_line, std::function<void()> on_ready = {}) {
  job_builder job("copy");
  auto first = std::make_shared<std::atomic<bool>>(false);
  auto hook = [first, at_first_line](const std::string& line) {
    if (at_first_line && !first->exchange(true)) at_first_line();
    return line;
  };
  const auto format = [](const std::string& line) { return line; };
  if (parallelism == indexed) {
    using indexed_line = std::pair<std::uint64_t, std::string>;
    job.read_indexed_lines("read", input)
        .map<std::string>([hook](const indexed_line& l) { return hook(l.second); })
        .write_lines(dir.file("out"), format);
  } else {
    job.read_lines("read", input, parallelism).map<std::string>(hook).write_lines(dir.file("out"), format);
  }
  job_settings settings = sluice::test::test_job_settings(dir.file("checkpoints"), checkpoint_mode::aligned, "local");
  if (on_ready) settings.on_ready = [on_ready](std::optional<sluice::snapshot::checkpoint_id>) { on_ready(); };
  return run_job(job, settings);
}

std::uint64_t write_input(const std::string& path) {
  sluice::test::write_corpus_file(path, 40'000, 7);  // about 1 MB: over 15 chunks of 64 KiB
  return fs::file_size(path);
}

}  // namespace

TEST_CASE("an input truncated while the job reads it fails the job naming the file and both sizes",
          "[dataflow][input_change]") {
  const std::size_t parallelism = GENERATE(as<std::size_t>{}, indexed, 1, 2);
  temp_dir dir;
  const std::string input = dir.file("in.txt");
  const std::uint64_t size = write_input(input);
  const std::uint64_t cut = size / 4;  // ahead of every reader: each has read one chunk at most
  const job_result r = run_copy(dir, input, parallelism, [&] { fs::resize_file(input, cut); });
  INFO(r.message);
  CHECK(r.exit_code == 1);
  // (With two tasks, the other one may open the file only after the change: it fails at its open,
  // in the same words.)
  CHECK(r.message.find("task read#") != std::string::npos);
  CHECK(r.message.find(" line file '" + input + "': it has " + std::to_string(cut) + " bytes, not the " +
                       std::to_string(size) + " it had when the job started (its fingerprint): it was truncated or "
                       "replaced while the job ran") != std::string::npos);
}

TEST_CASE("an input appended to while the job reads it fails the job naming the file and its fingerprinted size",
          "[dataflow][input_change]") {
  const std::size_t parallelism = GENERATE(as<std::size_t>{}, indexed, 1, 2);
  temp_dir dir;
  const std::string input = dir.file("in.txt");
  const std::uint64_t size = write_input(input);
  const std::string more = "words appended while the job reads\n";
  const job_result r =
      run_copy(dir, input, parallelism, [&] { std::ofstream(input, std::ios::binary | std::ios::app) << more; });
  INFO(r.message);
  CHECK(r.exit_code == 1);
  CHECK(r.message.find("task read#") != std::string::npos);
  CHECK(r.message.find(" line file '" + input + "': it has " + std::to_string(size + more.size()) + " bytes, not the " +
                       std::to_string(size) + " it had when the job started (its fingerprint): it was appended to or "
                       "replaced while the job ran") != std::string::npos);
}

TEST_CASE("an input changed after its fingerprint and before the job reads it fails the job naming both sizes",
          "[dataflow][input_change]") {
  temp_dir dir;
  const std::string input = dir.file("in.txt");
  const std::uint64_t size = write_input(input);
  const job_result r = run_copy(dir, input, 2, {}, [&] { fs::resize_file(input, size - 1); });
  INFO(r.message);
  CHECK(r.exit_code == 1);
  // on_ready runs on the host's lane, beside the tasks: the change lands before a task opens the file
  // ("open line file ...") or before its first read of it ("read line file ..."), as the machine's
  // load has it (CI once saw the second on epoll). Either way no line of it is published.
  CHECK(r.message.find(" line file '" + input + "': it has " + std::to_string(size - 1) + " bytes, not the " +
                       std::to_string(size) + " it had when the job started (its fingerprint)") != std::string::npos);
  CHECK(sluice::test::published_lines(dir.file("out")).empty());
}

TEST_CASE("an input that does not change is read whole and exactly by every parallelism",
          "[dataflow][input_change]") {
  const std::size_t parallelism = GENERATE(as<std::size_t>{}, indexed, 1, 3);
  temp_dir dir;
  const std::string input = dir.file("in.txt");
  write_input(input);
  const job_result r = run_copy(dir, input, parallelism, {});
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> lines;
  std::ifstream in(input);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  CHECK(sluice::test::published_lines(dir.file("out")) == lines);
}
