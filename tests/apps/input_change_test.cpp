// Inputs that are not what the job fingerprinted, as a user meets them with the `sluice` tool
// (issue 33): `--input /proc/version` (a "regular file" of stat size 0 that reads 16 words) used to
// end with exit 0 and no output; it is refused (exit 2) naming the file, before any directory is
// made. A rerun over an input appended to or truncated since its checkpoints is refused (exit 2)
// naming the file, both sizes and the change, and changes nothing. (An input changed while the job
// reads it fails the job: tests/dataflow/input_change_test.cpp forces that moment.)

#include "run_sluice.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using sluice::test::run_sluice;
using sluice::test::temp_dir;
using sluice::test::tool_run;

namespace fs = std::filesystem;

namespace {

std::string write_words(const temp_dir& dir, int lines) {
  const std::string path = dir.file("in.txt");
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) out << "w" << i % 50 << " x" << i % 7 << "\n";
  return path;
}

std::vector<std::string> wordcount(const std::string& input, const temp_dir& dir) {
  return {"wordcount", "--input", input, "--output", dir.file("out"), "--checkpoint-dir", dir.file("chk"), "--quiet"};
}

}  // namespace

TEST_CASE("an input whose stat size is 0 but reads bytes such as /proc/version is refused with exit 2 naming it",
          "[cli]") {
  temp_dir dir;
  const tool_run wc = run_sluice(wordcount("/proc/version", dir));
  INFO(wc.err);
  CHECK(wc.exit_code == 2);
  CHECK(wc.err.find("input '/proc/version': it reads more bytes than its size (0 bytes): it is a file whose size "
                    "does not tell its length (one of /proc or /sys)") != std::string::npos);
  CHECK(wc.err.find("save it to a file first") != std::string::npos);
  const std::string right = write_words(dir, 3);
  const tool_run join = run_sluice({"join", "--left", "/proc/version", "--right", right, "--window-ms", "1000",
                                    "--output", dir.file("out"), "--checkpoint-dir", dir.file("chk"), "--quiet"});
  INFO(join.err);
  CHECK(join.exit_code == 2);
  CHECK(join.err.find("input '/proc/version': it reads more bytes than its size") != std::string::npos);
  CHECK_FALSE(fs::exists(dir.file("out")));
  CHECK_FALSE(fs::exists(dir.file("chk")));
}

TEST_CASE("a rerun over an input appended to or truncated since its checkpoint is refused with exit 2 naming the change",
          "[cli]") {
  const bool append = GENERATE(true, false);
  temp_dir dir;
  const std::string input = write_words(dir, 5000);
  const auto size = fs::file_size(input);
  const tool_run first = run_sluice(wordcount(input, dir));
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  if (append) {
    std::ofstream(input, std::ios::app) << "w1 w2 w3\n";
  } else {
    fs::resize_file(input, size - 9);
  }
  const tool_run rerun = run_sluice(wordcount(input, dir));
  INFO(rerun.err);
  CHECK(rerun.exit_code == 2);
  CHECK(rerun.err.find("read input '" + input + "' (" + std::to_string(size) + " bytes, crc32c 0x") !=
        std::string::npos);
  CHECK(rerun.err.find(append ? "the file changed since the checkpoint (it is 9 bytes longer: appended to)"
                              : "the file changed since the checkpoint (it is 9 bytes shorter: truncated)") !=
        std::string::npos);
  CHECK(rerun.err.find("not resuming from '" + dir.file("chk") + "' (nothing was changed)") != std::string::npos);
}
