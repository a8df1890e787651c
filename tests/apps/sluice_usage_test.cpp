// The built `sluice` tool's usage errors, end to end: every one exits 2 with CLI11's message on
// stderr naming the option, writes nothing, and never leaks CLI11's own exit codes (105, 106,
// 109, ...); --help and --version exit 0; no subcommand at all is a usage error (exit 2).

#include "run_sluice.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

using sluice::test::lines_of;
using sluice::test::run_sluice;
using sluice::test::temp_dir;
using sluice::test::tool_run;

namespace {

bool empty_dir(const temp_dir& dir) { return std::filesystem::is_empty(dir.path()); }

// A usage error: exit 2, CLI11's message on stderr naming `what`, nothing on stdout.
void check_usage_error(const tool_run& r, const std::string& what) {
  INFO("stderr: " << r.err);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(what) != std::string::npos);
  CHECK(r.err.find("Run with --help for more information.") != std::string::npos);
  CHECK(r.out.empty());
}

// A file of `lines` lines for the jobs to read.
std::string input_file(const temp_dir& dir, int lines) {
  const std::string path = dir.file("in.txt");
  std::string text;
  for (int i = 0; i < lines; ++i) text += "a b c\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}


}  // namespace

TEST_CASE("an unknown option exits 2 and names it, for the tool and a subcommand", "[cli]") {
  temp_dir dir;
  check_usage_error(run_sluice({"--bogus"}), "--bogus");
  check_usage_error(run_sluice({"corpus", "--output", dir.file("c.txt"), "--bogus", "1"}), "--bogus");
  check_usage_error(run_sluice({"nosuchcommand"}), "nosuchcommand");
  CHECK(empty_dir(dir));
}

TEST_CASE("a missing required option exits 2 and names it", "[cli]") {
  temp_dir dir;
  check_usage_error(run_sluice({"wordcount", "--output", dir.file("out"), "--checkpoint-dir", dir.file("chk")}),
                    "--input is required");
  check_usage_error(run_sluice({"corpus"}), "--output is required");
  check_usage_error(run_sluice({"checkpoints"}), "DIR is required");
  CHECK(empty_dir(dir));
}

TEST_CASE("an input file that does not exist exits 2 and names the option and the file", "[cli]") {
  temp_dir dir;
  const std::string missing = dir.file("no-such-input.txt");
  tool_run r = run_sluice({"wordcount", "--input", missing, "--output", dir.file("out"), "--checkpoint-dir",
                           dir.file("chk")});
  check_usage_error(r, "--input");
  CHECK(r.err.find(missing) != std::string::npos);
  CHECK(empty_dir(dir));  // no output or checkpoint directory made
}

TEST_CASE("an extra positional argument exits 2 and names it", "[cli]") {
  temp_dir dir;
  check_usage_error(run_sluice({"corpus", "--output", dir.file("c.txt"), "surplus"}), "surplus");
  CHECK(empty_dir(dir));
}

TEST_CASE("corpus --lines -1 exits 2 naming --lines and its range, and writes no file", "[cli]") {
  temp_dir dir;
  tool_run r = run_sluice({"corpus", "--lines", "-1", "--output", dir.file("c.txt")});
  check_usage_error(r, "--lines: '-1' is negative");
  CHECK(r.err.find("[0, 1000000000]") != std::string::npos);
  check_usage_error(run_sluice({"corpus", "--lines=-1", "--output", dir.file("c.txt")}), "--lines");
  CHECK(empty_dir(dir));
}

TEST_CASE("corpus --lines beyond 64 bits or beyond its range exits 2 and writes no file", "[cli]") {
  temp_dir dir;
  check_usage_error(run_sluice({"corpus", "--lines", "99999999999999999999", "--output", dir.file("c.txt")}),
                    "--lines: '99999999999999999999' is out of range");
  check_usage_error(run_sluice({"corpus", "--lines", "1000000001", "--output", dir.file("c.txt")}),
                    "--lines: '1000000001' is out of range");
  check_usage_error(run_sluice({"corpus", "--lines", "12abc", "--output", dir.file("c.txt")}),
                    "--lines: '12abc' is not a whole number");
  check_usage_error(run_sluice({"corpus", "--lines", "0x10", "--output", dir.file("c.txt")}), "--lines");
  CHECK(empty_dir(dir));
}

TEST_CASE("corpus --lines reads decimal: 010 is ten lines, not eight", "[cli]") {
  temp_dir dir;
  tool_run r = run_sluice({"corpus", "--lines", "010", "--output", dir.file("c.txt")});
  INFO("stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(lines_of(sluice::test::read_whole_file(dir.file("c.txt"))).size() == 10);
}

TEST_CASE("wordcount --window-lines -1 exits 2 naming the option, and makes no output", "[cli]") {
  temp_dir dir;
  const std::string input = input_file(dir, 3);
  check_usage_error(run_sluice({"wordcount", "--input", input, "--output", dir.file("out"), "--checkpoint-dir",
                                dir.file("chk"), "--window-lines", "-1"}),
                    "--window-lines: '-1' is negative");
  CHECK(!std::filesystem::exists(dir.file("out")));
  CHECK(!std::filesystem::exists(dir.file("chk")));
}

TEST_CASE("join-input --keys -1 and --keys 0 exit 2 naming the option, and write no file", "[cli]") {
  temp_dir dir;
  check_usage_error(run_sluice({"join-input", "--output", dir.file("l.csv"), "--keys", "-1"}),
                    "--keys: '-1' is negative");
  check_usage_error(run_sluice({"join-input", "--output", dir.file("l.csv"), "--keys", "0"}),
                    "--keys: '0' is out of range");
  check_usage_error(run_sluice({"join-input", "--output", dir.file("l.csv"), "--rows", "-5"}), "--rows");
  CHECK(empty_dir(dir));
}

TEST_CASE("a parallelism of 0, 65 or -1 exits 2 naming the range, for wordcount and join", "[cli]") {
  temp_dir dir;
  const std::string input = input_file(dir, 3);
  for (const char* p : {"0", "65", "-1"}) {
    INFO("--parallelism " << p);
    tool_run r = run_sluice({"wordcount", "--input", input, "--output", dir.file("out"), "--checkpoint-dir",
                             dir.file("chk"), "--parallelism", p});
    check_usage_error(r, "--parallelism");
    CHECK(r.err.find("[1, 64]") != std::string::npos);
    check_usage_error(run_sluice({"join", "--left", input, "--right", input, "--output", dir.file("out"),
                                  "--checkpoint-dir", dir.file("chk"), "--window-ms", "10", "--parallelism", p}),
                      "--parallelism");
  }
  CHECK(!std::filesystem::exists(dir.file("out")));
  CHECK(!std::filesystem::exists(dir.file("chk")));
}

TEST_CASE("the other numeric options of the jobs, demo and bench reject negative and out-of-range values", "[cli]") {
  temp_dir dir;
  const std::string input = input_file(dir, 3);
  const std::vector<std::string> job = {"wordcount", "--input", input, "--output", dir.file("out"),
                                        "--checkpoint-dir", dir.file("chk")};
  const auto with = [&job](std::vector<std::string> extra) {
    std::vector<std::string> args = job;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  check_usage_error(run_sluice(with({"--checkpoint-interval-ms", "0"})), "--checkpoint-interval-ms");
  check_usage_error(run_sluice(with({"--checkpoint-interval-ms", "-1"})), "--checkpoint-interval-ms: '-1' is negative");
  check_usage_error(run_sluice(with({"--alignment-timeout-ms", "18446744073709551615"})), "--alignment-timeout-ms");
  check_usage_error(run_sluice(with({"--executors", "65"})), "--executors");
  check_usage_error(run_sluice(with({"--slow-sink-us", "100001"})), "--slow-sink-us");
  check_usage_error(run_sluice({"join", "--left", input, "--right", input, "--output", dir.file("out"),
                                "--checkpoint-dir", dir.file("chk"), "--window-ms", "10", "--slow-sink-us", "-1"}),
                    "--slow-sink-us: '-1' is negative");
  check_usage_error(run_sluice({"join", "--left", input, "--right", input, "--output", dir.file("out"),
                                "--checkpoint-dir", dir.file("chk"), "--window-ms", "0"}),
                    "--window-ms");
  check_usage_error(run_sluice({"join-input", "--output", dir.file("l.csv"), "--span-ms", "10000000001"}), "--span-ms");
  check_usage_error(run_sluice({"corpus", "--output", dir.file("c.txt"), "--seed", "-1"}), "--seed: '-1' is negative");
  check_usage_error(run_sluice({"demo", "--duration-ms", "-1"}), "--duration-ms: '-1' is negative");
  check_usage_error(run_sluice({"demo", "--connections", "0"}), "--connections");
  check_usage_error(run_sluice({"bench", "nop", "--ops", "-1"}), "--ops: '-1' is negative");
  check_usage_error(run_sluice({"bench", "nop", "--batch", "257"}), "--batch: '257' is out of range");
  check_usage_error(run_sluice({"bench", "switch", "--runs", "0"}), "--runs");
  check_usage_error(run_sluice({"bench", "checkpoint", "--seconds", "nan"}), "--seconds");
  CHECK(!std::filesystem::exists(dir.file("out")));
  CHECK(!std::filesystem::exists(dir.file("chk")));
  CHECK(!std::filesystem::exists(dir.file("l.csv")));
  CHECK(!std::filesystem::exists(dir.file("c.txt")));
}

TEST_CASE("a cluster-only option without --cluster exits 2 naming it and runs nothing", "[cli]") {
  temp_dir dir;
  const std::string input = input_file(dir, 3);
  const std::vector<std::vector<std::string>> cluster_only = {
      {"--job-name", "j"},          {"--workers", "2"},  {"--worker-index", "1"}, {"--listen", "127.0.0.1:1"},
      {"--advertise", "127.0.0.1:1"}, {"--secret-file", input}};
  for (const auto& option : cluster_only) {
    std::vector<std::string> args = {"wordcount", "--input", input, "--output", dir.file("out"), "--checkpoint-dir",
                                     dir.file("chk")};
    args.insert(args.end(), option.begin(), option.end());
    check_usage_error(run_sluice(args), option[0] + " requires --cluster");
  }
  check_usage_error(run_sluice({"join", "--left", input, "--right", input, "--output", dir.file("out"),
                                "--checkpoint-dir", dir.file("chk"), "--window-ms", "10", "--workers", "3"}),
                    "--workers requires --cluster");
  CHECK(!std::filesystem::exists(dir.file("out")));
  CHECK(!std::filesystem::exists(dir.file("chk")));
}

TEST_CASE("a benchmark's own check of its options exits 2 too, naming the option", "[cli]") {
  tool_run r = run_sluice({"bench", "nop", "--variant", "bogus"});
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("sluice bench nop: --variant must be") != std::string::npos);
}

TEST_CASE("help and version exit 0 and print on stdout", "[cli]") {
  tool_run version = run_sluice({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.out.find(SLUICE_PROJECT_VERSION) != std::string::npos);
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--help"}, {"corpus", "--help"}, {"wordcount", "--help"}, {"join", "--help"}, {"bench", "nop", "--help"}}) {
    INFO(args.front());
    tool_run r = run_sluice(args);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("Usage:") != std::string::npos);
    CHECK(r.err.empty());
  }
}

TEST_CASE("sluice without a subcommand prints its usage on stderr and exits 2", "[cli]") {
  const tool_run r = run_sluice({});
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find("Usage: sluice [OPTIONS] [SUBCOMMAND]") != std::string::npos);  // the name, not the path
  CHECK(r.err.find("wordcount") != std::string::npos);
}

TEST_CASE("every job command's --help lists the exit codes and the progress line's fields", "[cli]") {
  for (const char* command : {"wordcount", "join", "nexmark"}) {
    INFO(command);
    const tool_run r = run_sluice({command, "--help"});
    CHECK(r.exit_code == 0);
    CHECK(r.out.find(std::string("Usage: sluice ") + command) != std::string::npos);
    for (const char* code : {"\n  0 ", "\n  1 ", "\n  2 ", "\n  130 "}) CHECK(r.out.find(code) != std::string::npos);
    for (const char* field : {"lines read", "lines/s", "written", "backpressure", "last chk-N"}) CHECK(r.out.find(field) != std::string::npos);
  }
}

// A numeric option shows its type (UINT, FLOAT) in --help; its range follows as "in [min, max]". A
// benchmark option missing from apps/sluice/bench_ranges.cpp gets its type's whole range, which
// no benchmark option should have.
TEST_CASE("every numeric option of every command and benchmark shows its range in --help", "[cli]") {
  std::vector<std::vector<std::string>> commands = {{"wordcount"}, {"join"},        {"join-input"}, {"corpus"},
                                                    {"checkpoints"}, {"demo"}, {"bench"}};
  tool_run list = run_sluice({"bench", "--list"});
  REQUIRE(list.exit_code == 0);
  for (const std::string& line : lines_of(list.out)) {
    if (line.rfind("  ", 0) != 0) continue;  // "  <name> <description>"
    std::istringstream in(line);
    std::string name;
    in >> name;
    commands.push_back({"bench", name});
  }
  REQUIRE(commands.size() >= 8);  // this build has benchmarks (SLUICE_BUILD_BENCH is on by default)
  std::size_t numeric = 0;
  for (std::vector<std::string> args : commands) {
    args.push_back("--help");
    tool_run r = run_sluice(args);
    INFO(args.front() << " " << args[1]);
    REQUIRE(r.exit_code == 0);
    for (const std::string& line : lines_of(r.out)) {
      if (line.find(" UINT") == std::string::npos && line.find(" FLOAT") == std::string::npos) continue;
      INFO(line);
      CHECK(line.find(":in [") != std::string::npos);
      if (args.front() == "bench") {
        CHECK(line.find("18446744073709551615]") == std::string::npos);
        CHECK(line.find("4294967295]") == std::string::npos);
        CHECK(line.find("e+308]") == std::string::npos);
      }
      ++numeric;
    }
  }
  CHECK(numeric >= 40);
}
