// `sluice join --state-ttl-ms T` (issue 34, state TTL): the regular join with an event-time state
// TTL from the command line publishes exactly the pairs of equal keys less than T ms apart, computed
// here from the two input files; and the tool refuses both or neither of --window-ms and
// --state-ttl-ms (exit 2, nothing made).

#include "cluster_support.hpp"
#include "run_sluice.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using sluice::test::published_lines;
using sluice::test::read_whole_file;
using sluice::test::run_sluice;
using sluice::test::temp_dir;
using sluice::test::tool_run;

namespace {

struct row {
  std::string key;
  std::uint64_t time = 0;
  std::string payload;
};

std::vector<row> rows_of(const std::string& path) {
  std::vector<row> rows;
  std::istringstream in(read_whole_file(path));
  for (std::string line; std::getline(in, line);) {
    const std::size_t a = line.find(',');
    const std::size_t b = line.find(',', a + 1);
    rows.push_back(row{line.substr(0, a), std::stoull(line.substr(a + 1, b - a - 1)), line.substr(b + 1)});
  }
  return rows;
}

// "left_time key left_payload right_payload" for every pair of equal keys less than ttl apart.
std::vector<std::string> reference(const std::vector<row>& left, const std::vector<row>& right, std::uint64_t ttl) {
  std::vector<std::string> out;
  for (const row& l : left) {
    for (const row& r : right) {
      if (l.key != r.key) continue;
      const std::uint64_t apart = l.time > r.time ? l.time - r.time : r.time - l.time;
      if (apart < ttl) out.push_back(std::to_string(l.time) + " " + l.key + " " + l.payload + " " + r.payload);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("sluice join --state-ttl-ms publishes exactly the pairs less than the ttl apart", "[cli][ttl]") {
  temp_dir dir;
  const std::string left = dir.file("left.csv");
  const std::string right = dir.file("right.csv");
  for (const auto& [file, seed, prefix] : {std::tuple{left, "1", "L"}, std::tuple{right, "2", "R"}}) {
    const tool_run made = run_sluice({"join-input", "--output", file, "--rows", "4000", "--keys", "40", "--span-ms",
                                      "60000", "--seed", seed, "--prefix", prefix});
    INFO(made.err);
    REQUIRE(made.exit_code == 0);
  }
  const std::uint64_t ttl = 700;
  const tool_run run = run_sluice({"join", "--left", left, "--right", right, "--output", dir.file("out"),
                                   "--checkpoint-dir", dir.file("chk"), "--state-ttl-ms", std::to_string(ttl),
                                   "--checkpoint-interval-ms", "20", "--quiet"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::vector<std::string> expected = reference(rows_of(left), rows_of(right), ttl);
  CHECK(expected.size() > 1000);  // the test means something: many pairs, and many more rows apart
  CHECK(published_lines(dir.file("out")) == expected);
}

TEST_CASE("sluice join takes one of --window-ms and --state-ttl-ms, and refuses both or neither with exit 2",
          "[cli][ttl]") {
  temp_dir dir;
  const std::string input = dir.file("in.csv");
  {
    std::ofstream out(input);
    out << "k,1,a\n";
  }
  const std::vector<std::string> base = {"join", "--left", input, "--right", input, "--output", dir.file("out"),
                                         "--checkpoint-dir", dir.file("chk"), "--quiet"};
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--window-ms", "10", "--state-ttl-ms", "10"}}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const tool_run r = run_sluice(args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("give --window-ms (the window join) or --state-ttl-ms") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("out")));
  CHECK_FALSE(std::filesystem::exists(dir.file("chk")));
}
