// `sluice bench state` (bench/state_bench.cpp) on a small key space: every figure it reports is
// there and plausible (its checkpoints wrote, its kept checkpoints' full state holds the table, the
// resumed run restored it), and a bad --keys list is refused before anything runs.

#include "run_sluice.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

using sluice::test::lines_of;
using sluice::test::run_sluice;
using sluice::test::tool_run;

TEST_CASE("sluice bench state reports throughput checkpoints and restore per key count") {
  const tool_run r =
      run_sluice({"bench", "state", "--keys", "50,3000", "--lines", "20000", "--runs", "1", "--interval-ms", "20", "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<nlohmann::json> results;
  for (const std::string& line : lines_of(r.out)) results.push_back(nlohmann::json::parse(line));
  REQUIRE(results.size() == 2);
  for (const auto& j : results) CHECK(j.at("bench") == "state");
  CHECK(results[0].at("keys") == 50);
  CHECK(results[1].at("keys").get<std::uint64_t>() > 2500);  // drawn uniformly: nearly all appear
  CHECK(results[1].at("keys").get<std::uint64_t>() <= 3000);
  for (const auto& j : results) {
    CHECK(j.at("words_per_s").get<double>() > 0);
    CHECK(j.at("baseline_words_per_s").get<double>() > 0);
    CHECK(j.at("checkpoints").get<std::uint64_t>() >= 1);  // the final one at least
    CHECK(j.at("written_bytes").get<double>() > 0);
    CHECK(j.at("state_checkpoints").get<std::uint64_t>() >= 1);  // the final one at least
    CHECK(j.at("state_bytes").get<double>() > 0);
    CHECK(j.at("restore_state_bytes").get<double>() > 0);
    CHECK(j.at("restore_ms").get<double>() > 0);
  }
  // 3,000 keys hold more state than 50.
  CHECK(results[1].at("state_bytes").get<double>() > 10 * results[0].at("state_bytes").get<double>());
  CHECK(results[1].at("restore_state_bytes").get<double>() > 10 * results[0].at("restore_state_bytes").get<double>());
}

TEST_CASE("sluice bench state refuses a key list that is not numbers") {
  for (const char* bad : {"100,x", "", "0", "10,,20", "5k"}) {
    const tool_run r = run_sluice({"bench", "state", "--keys", bad, "--runs", "1"});
    INFO(bad << ": " << r.err);
    CHECK(r.exit_code != 0);
    CHECK(r.signal == 0);
    CHECK(r.err.find("--keys") != std::string::npos);
  }
}
