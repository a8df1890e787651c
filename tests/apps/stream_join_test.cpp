// The window join on streams (issue 16: stream sources emit watermarks): `sluice join --left
// nats://... --right nats://...` takes its watermarks from the lines' timestamps (event_time.hpp).
// Lines out of order within --max-out-of-orderness-ms join exactly as the sorted files do, through
// SIGKILLs; a line further behind fails the job naming it.
// GCC 12 reports a false -Wstringop-overflow inside std::string copies inlined at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#include "cluster_support.hpp"
#include "run_sluice.hpp"
#include "stream_support.hpp"

#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/nats_server.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace sluice;
using namespace sluice::test;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::uint64_t time_of(const std::string& line) { return dataflow::parse_join_row(line).timestamp_ms; }

// `lines` (sorted by time) with some lines swapped with the one two places on: each line then comes
// at most `bound` ms behind the latest before it. Two places, because task i of 2 reads the messages
// i, i + 2, ... (the JetStream source splits a stream by sequence): each task sees the swaps.
// Returns how many pairs were swapped.
std::size_t disorder(std::vector<std::string>& lines, std::uint64_t bound, std::mt19937& random) {
  std::size_t swapped = 0;
  for (std::size_t i = 0; i + 3 < lines.size(); i += 4) {
    for (std::size_t a = i; a < i + 2; ++a) {
      if (random() % 3 != 0 || time_of(lines[a + 2]) - time_of(lines[a]) > bound) continue;
      std::swap(lines[a], lines[a + 2]);
      ++swapped;
    }
  }
  return swapped;
}

struct join_fixture {
  temp_dir dir;
  nats_server nats{subdir(dir, "nats")};
  std::string left = dir.file("left.csv");
  std::string right = dir.file("right.csv");

  join_fixture() {
    nats.start();
    REQUIRE(run_sluice({"join-input", "--output", left, "--rows", "6000", "--keys", "300", "--span-ms", "30000",
                        "--seed", std::to_string(Catch::rngSeed()), "--prefix", "l"})
                .exit_code == 0);
    REQUIRE(run_sluice({"join-input", "--output", right, "--rows", "6000", "--keys", "300", "--span-ms", "30000",
                        "--seed", std::to_string(Catch::rngSeed() + 1), "--prefix", "r"})
                .exit_code == 0);
  }
  // The join of the sorted files, as published lines.
  std::vector<std::string> reference() const {
    const tool_run ref = run_sluice({"join", "--left", left, "--right", right, "--window-ms", "1000", "--output",
                                     dir.file("reference"), "--checkpoint-dir", dir.file("reference-chk"), "--quiet"});
    REQUIRE(ref.exit_code == 0);
    return published_lines(dir.file("reference"));
  }
  // Streams "left" and "right" with the files' lines, each disordered within `bound` ms.
  void fill(std::uint64_t bound, std::mt19937& random) const {
    for (const auto& [file, stream] : {std::pair{left, "left"}, std::pair{right, "right"}}) {
      std::vector<std::string> lines = lines_of(file);
      const std::size_t swapped = disorder(lines, bound, random);
      REQUIRE(swapped > 100);
      runtime::sync_wait(fill_stream(nats.port(), stream, lines));
    }
  }
  std::vector<std::string> args(const std::string& out, std::uint64_t bound) const {
    return {"join", "--left", nats_at(nats, "left"), "--right", nats_at(nats, "right"), "--bounded",
            "--max-out-of-orderness-ms", std::to_string(bound), "--window-ms", "1000", "--output", out,
            "--checkpoint-dir", dir.file("chk-" + std::to_string(bound)), "--checkpoint-interval-ms", "40",
            "--parallelism", "2", "--slow-sink-us", "1000", "--quiet"};
  }
};

}  // namespace

TEST_CASE("the join of two JetStream streams out of order within the bound, SIGKILLed at random moments, equals the sorted files' join") {
  SLUICE_SKIP_WITHOUT_NATS();
  join_fixture f;
  const std::vector<std::string> expected = f.reference();
  REQUIRE(expected.size() > 1000);
  std::mt19937 random(Catch::rngSeed());
  f.fill(50, random);
  int landed = 0;
  const int code = run_with_kills(f.args(f.dir.file("out"), 50), f.dir.file("job.log"), 3, random, 100, 1500, landed);
  INFO(read_whole_file(f.dir.file("job.log")));
  REQUIRE(code == 0);
  std::printf("measured: JetStream window join: %d SIGKILLs landed\n", landed);
  CHECK(published_lines(f.dir.file("out")) == expected);
}

TEST_CASE("a stream line further behind than --max-out-of-orderness-ms fails the join, naming its time and the bound") {
  SLUICE_SKIP_WITHOUT_NATS();
  join_fixture f;
  std::mt19937 random(Catch::rngSeed());
  f.fill(50, random);
  const tool_run r = run_sluice(f.args(f.dir.file("out"), 0));
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("came after one with") && Catch::Contains("max out-of-orderness 0") &&
                        Catch::Contains("source=nats"));
}

TEST_CASE("a join of two files refuses --max-out-of-orderness-ms and --bounded before anything runs (exit 2)") {
  temp_dir dir;
  const std::string input = dir.file("in.csv");
  REQUIRE(run_sluice({"join-input", "--output", input, "--rows", "10"}).exit_code == 0);
  const std::vector<std::string> join = {"join", "--left", input, "--right", input, "--window-ms", "10", "--output",
                                         dir.file("out"), "--checkpoint-dir", dir.file("chk")};
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--max-out-of-orderness-ms", "5"},
                                                std::vector<std::string>{"--bounded"}}) {
    std::vector<std::string> args = join;
    args.insert(args.end(), extra.begin(), extra.end());
    const tool_run r = run_sluice(args);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(extra.front()));
  }
  CHECK(!std::filesystem::exists(dir.file("chk")));
  CHECK(!std::filesystem::exists(dir.file("out")));
}
