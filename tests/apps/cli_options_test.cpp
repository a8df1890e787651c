// The number options and usage errors of the sluice tool (apps/sluice/cli_options.hpp), on a
// CLI::App of the test's own, and the benchmarks' range table (bench_ranges.hpp).

#include "bench_ranges.hpp"
#include "cli_options.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using sluice::apps::add_number_option;
using sluice::apps::parse_command_line;

namespace {

// Parses `args` (after the program name); returns CLI11's message, or "" when they parsed.
std::string parse_error(CLI::App& app, std::vector<std::string> args) {
  std::vector<const char*> argv{"test"};
  for (auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    return {};
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
}

struct counts {
  CLI::App app{"test"};
  std::uint64_t lines = 5;
  unsigned small = 1;
  double seconds = 1.5;
  counts() {
    add_number_option(app, "--lines", lines, "lines", 0, 1000);
    add_number_option(app, "--small", small, "a small count", 1, 64);
    add_number_option(app, "--seconds", seconds, "seconds", 0.1, 600.0);
  }
};

}  // namespace

TEST_CASE("an unsigned option rejects a negative number, naming the option and the range", "[cli]") {
  counts c;
  CHECK(parse_error(c.app, {"--lines", "-1"}) == "--lines: '-1' is negative: expected a whole number in [0, 1000]");
  CHECK(c.lines == 5);
  counts d;
  CHECK(parse_error(d.app, {"--small=-3"}) == "--small: '-3' is negative: expected a whole number in [1, 64]");
}

TEST_CASE("a whole number past 64 bits or past the range is out of range, its bounds are in", "[cli]") {
  counts c;
  CHECK(parse_error(c.app, {"--lines", "99999999999999999999"}) ==
        "--lines: '99999999999999999999' is out of range: expected a whole number in [0, 1000]");
  counts over;
  CHECK(parse_error(over.app, {"--lines", "1001"}).find("'1001' is out of range") != std::string::npos);
  counts under;
  CHECK(parse_error(under.app, {"--small", "0"}).find("'0' is out of range") != std::string::npos);
  counts top;
  CHECK(parse_error(top.app, {"--lines", "1000", "--small", "64"}).empty());
  CHECK(top.lines == 1000);
  CHECK(top.small == 64);
  counts bottom;
  CHECK(parse_error(bottom.app, {"--lines", "0", "--small", "1"}).empty());
  CHECK(bottom.lines == 0);
  CHECK(bottom.small == 1);
}

TEST_CASE("a whole number is read in decimal only, leading zeros and all", "[cli]") {
  counts c;
  CHECK(parse_error(c.app, {"--lines", "010"}).empty());
  CHECK(c.lines == 10);  // CLI11 alone reads base 0: 8
  for (const char* bad : {"0x10", "1e3", "+5", " 5", "5 ", "12abc", "1.0", ""}) {
    counts d;
    INFO("'" << bad << "'");
    CHECK(parse_error(d.app, {"--lines", bad}).find("is not a whole number: expected a whole number in [0, 1000]") !=
          std::string::npos);
    CHECK(d.lines == 5);
  }
}

TEST_CASE("a floating-point option takes finite numbers in its range only", "[cli]") {
  counts c;
  CHECK(parse_error(c.app, {"--seconds", "0.25"}).empty());
  CHECK(c.seconds == 0.25);
  counts neg;
  CHECK(parse_error(neg.app, {"--seconds", "-1"}) == "--seconds: '-1' is negative: expected a number in [0.1, 600]");
  for (const char* bad : {"nan", "inf", "1e999", "600.5", "0.01"}) {
    counts d;
    INFO(bad);
    CHECK(parse_error(d.app, {"--seconds", bad}).find("is out of range") != std::string::npos);
    CHECK(d.seconds == 1.5);
  }
  counts text;
  CHECK(parse_error(text.app, {"--seconds", "soon"}).find("'soon' is not a number") != std::string::npos);
}

TEST_CASE("an option whose default lies outside its range is a programming error", "[cli]") {
  CLI::App app{"test"};
  std::uint64_t zero = 0;
  CHECK_THROWS_AS(add_number_option(app, "--n", zero, "n", 1, 10), std::logic_error);
  unsigned big = 100;
  CHECK_THROWS_AS(add_number_option(app, "--m", big, "m", 1, 64), std::logic_error);
}

TEST_CASE("parse_command_line: 2 for every usage error, 0 for --help, nothing to return for a good line", "[cli]") {
  const auto parse = [](std::vector<std::string> args) {
    CLI::App app{"test"};
    std::uint64_t lines = 5;
    std::string output;
    add_number_option(app, "--lines", lines, "lines", 0, 1000);
    app.add_option("--output", output, "output")->required();
    std::vector<const char*> argv{"test"};
    for (auto& a : args) argv.push_back(a.c_str());
    return parse_command_line(app, static_cast<int>(argv.size()), argv.data());
  };
  CHECK(parse({"--output", "x"}) == std::nullopt);
  CHECK(parse({"--help"}) == 0);
  CHECK(parse({"--output", "x", "--lines", "-1"}) == 2);      // CLI11: 105 (ValidationError)
  CHECK(parse({"--lines", "3"}) == 2);                        // 106 (RequiredError)
  CHECK(parse({"--output", "x", "--bogus"}) == 2);            // 109 (ExtrasError)
  CHECK(parse({"--output", "x", "surplus"}) == 2);            // 109
  CHECK(parse({"--output"}) == 2);                            // 114 (ArgumentMismatch)
}

TEST_CASE("the benchmarks' range table has each option's range, and nothing for an unknown one", "[cli]") {
  const auto batch = sluice::apps::bench_option_range("nop", "--batch");
  REQUIRE(batch.has_value());
  CHECK(batch->min == 1);
  CHECK(batch->max == 256);
  CHECK(!sluice::apps::bench_option_range("nop", "--no-such-option").has_value());
  CHECK(!sluice::apps::bench_option_range("no-such-bench", "--batch").has_value());
}
