// The Nexmark queries against an independent single-threaded evaluation of the same events
// (reference.hpp: loops over generate_event, not the job API), at several parallelisms, under SIGKILLs,
// and refused on resume with another generator.

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/nexmark/queries.hpp>

#include <support/sanitizers.hpp>
#include <support/temp_dir.hpp>

#include "dataflow/crash_support.hpp"
#include "dataflow/wordcount_support.hpp"
#include "nexmark/reference.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace sluice;
using sluice::test::published_lines;
using sluice::test::temp_dir;

namespace {

// The rows of a query over events [first, first + events), sorted: what the job must publish.
std::vector<std::string> reference_rows(const std::string& query, std::uint64_t first, std::uint64_t events,
                                        const nexmark::generator_config& c) {
  return sluice::test::reference_rows(query, sluice::test::reference_events(first, events, c));
}

nexmark::query_spec spec_of(const std::string& query, std::uint64_t first, std::uint64_t events, std::size_t p,
                            const std::string& out) {
  nexmark::query_spec spec;
  spec.query = query;
  spec.first_event = first;
  spec.events = events;
  spec.parallelism = p;
  spec.output = out;
  spec.generator.events_per_second = 1000;
  return spec;
}

int run_query(const nexmark::query_spec& spec, const std::string& checkpoints,
              snapshot::checkpoint_mode mode = snapshot::checkpoint_mode::unaligned) {
  dataflow::job_builder job("nexmark-" + spec.query);
  nexmark::build_query(job, spec);
  return dataflow::run_job(job, sluice::test::test_job_settings(checkpoints, mode, "local")).exit_code;
}

// Runs the query into spec.output with checkpoints every 10 ms under `dir`/chk, killed with SIGKILL
// five times at random moments (from `seed`), until it finishes.
sluice::test::crash_report run_killed(const nexmark::query_spec& spec, const temp_dir& dir, std::uint64_t seed) {
  const auto job = [&spec, &dir] {
    dataflow::job_builder built("nexmark-" + spec.query);
    nexmark::build_query(built, spec);
    auto settings = sluice::test::test_job_settings(dir.file("chk"), snapshot::checkpoint_mode::unaligned, "local");
    settings.checkpoint_interval = std::chrono::milliseconds(10);
    return dataflow::run_job(built, settings).exit_code;
  };
  const auto reset = [&spec, &dir] {
    std::filesystem::remove_all(spec.output);
    std::filesystem::remove_all(dir.file("chk"));
  };
  return sluice::test::run_until_done(job, reset, seed, 5, 150);
}

}  // namespace

TEST_CASE("nexmark q0, q1 and q2 publish exactly the rows of a single-threaded evaluation", "[nexmark][queries]") {
  const std::string query = GENERATE(std::string("q0"), std::string("q1"), std::string("q2"));
  const std::size_t parallelism = GENERATE(1u, 3u);
  const temp_dir dir;
  const auto spec = spec_of(query, 777, 30'000, parallelism, dir.file("out"));
  REQUIRE(run_query(spec, dir.file("chk")) == 0);
  const auto rows = published_lines(dir.file("out"));
  CHECK(rows.size() > (query == "q2" ? 100u : 27'000u));
  CHECK(rows == reference_rows(query, 777, 30'000, spec.generator));
}

TEST_CASE("nexmark q3, q4, q5, q7 and q8 publish exactly the rows of a single-threaded evaluation",
          "[nexmark][queries]") {
  const std::string query = GENERATE(std::string("q3"), std::string("q4"), std::string("q5"), std::string("q7"),
                                     std::string("q8"));
  const std::size_t parallelism = GENERATE(1u, 3u);
  const auto mode = GENERATE(snapshot::checkpoint_mode::aligned, snapshot::checkpoint_mode::unaligned);
  const temp_dir dir;
  const auto spec = spec_of(query, 777, 60'000, parallelism, dir.file("out"));
  REQUIRE(run_query(spec, dir.file("chk"), mode) == 0);
  const auto rows = published_lines(dir.file("out"));
  const auto expected = reference_rows(query, 777, 60'000, spec.generator);
  CHECK(expected.size() >= 5u);
  CHECK(rows == expected);
}

TEST_CASE("nexmark q1, q3, q4, q5, q7 and q8 killed with SIGKILL at random moments publish exactly the reference rows",
          "[nexmark][queries][crash]") {
  const std::string query = GENERATE(std::string("q1"), std::string("q3"), std::string("q4"), std::string("q5"), std::string("q7"),
                                     std::string("q8"));
  const temp_dir dir;
  const std::uint64_t events = sluice::test::scaled_for_tsan(1'000'000);  // long enough for five kills
  const auto spec = spec_of(query, 0, events, 2, dir.file("out"));
  const auto report = run_killed(spec, dir, 20261204);
  CHECK(report.kills > 0);
  REQUIRE(report.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == reference_rows(query, 0, events, spec.generator));
}

TEST_CASE("nexmark q3 with an event-time state TTL publishes exactly the pairs less than the ttl apart",
          "[nexmark][queries]") {
  const std::size_t parallelism = GENERATE(1u, 3u);
  const std::uint64_t ttl_ms = GENERATE(2'000u, 100'000u);
  const temp_dir dir;
  auto spec = spec_of("q3", 777, 200'000, parallelism, dir.file("out"));
  spec.state_ttl_ms = ttl_ms;
  REQUIRE(run_query(spec, dir.file("chk")) == 0);
  const auto events = sluice::test::reference_events(777, 200'000, spec.generator);
  const auto expected = sluice::test::reference_q3_rows(events, ttl_ms);
  CHECK(published_lines(dir.file("out")) == expected);
  // A short ttl misses rows; one longer than a seller's life (the last 1,000 persons, 50 s at 1,000
  // events/s) misses none.
  const auto all = reference_rows("q3", 777, 200'000, spec.generator);
  CHECK((ttl_ms == 2'000u ? expected.size() < all.size() : expected == all));
}

TEST_CASE("nexmark q3 with a short event-time state TTL killed with SIGKILL publishes exactly the rows of a run "
          "without kills, which lack the rows whose seller expired",
          "[nexmark][queries][crash]") {
  const temp_dir dir;
  const std::uint64_t events = sluice::test::scaled_for_tsan(600'000);
  auto spec = spec_of("q3", 0, events, 2, dir.file("straight"));
  spec.state_ttl_ms = 1'500;  // shorter than some sellers' runs of auctions: rows are missed
  REQUIRE(run_query(spec, dir.file("chk-straight")) == 0);
  const auto straight = published_lines(dir.file("straight"));
  CHECK(straight == sluice::test::reference_q3_rows(sluice::test::reference_events(0, events, spec.generator), 1'500));
  CHECK(straight.size() < reference_rows("q3", 0, events, spec.generator).size());

  spec.output = dir.file("out");
  const auto report = run_killed(spec, dir, 20261207);
  CHECK(report.kills > 0);
  REQUIRE(report.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == straight);
}

TEST_CASE("a nexmark query resumed with another rate, first event, ratio, size or query is refused and changes nothing",
          "[nexmark][queries]") {
  const temp_dir dir;
  REQUIRE(run_query(spec_of("q2", 0, 5'000, 2, dir.file("out")), dir.file("chk")) == 0);
  const auto before = published_lines(dir.file("out"));
  auto other_rate = spec_of("q2", 0, 5'000, 2, dir.file("out"));
  other_rate.generator.events_per_second = 2000;
  CHECK(run_query(other_rate, dir.file("chk")) == 2);
  CHECK(run_query(spec_of("q2", 10, 5'000, 2, dir.file("out")), dir.file("chk")) == 2);
  auto other_ratio = spec_of("q2", 0, 5'000, 2, dir.file("out"));
  other_ratio.generator.hot_bidders_ratio = 5;
  CHECK(run_query(other_ratio, dir.file("chk")) == 2);
  auto other_size = spec_of("q2", 0, 5'000, 2, dir.file("out"));
  other_size.generator.avg_bid_bytes = 120;
  CHECK(run_query(other_size, dir.file("chk")) == 2);
  CHECK(run_query(spec_of("q1", 0, 5'000, 2, dir.file("out")), dir.file("chk")) == 2);
  CHECK(published_lines(dir.file("out")) == before);
  // The same arguments resume the finished job and change nothing.
  CHECK(run_query(spec_of("q2", 0, 5'000, 2, dir.file("out")), dir.file("chk")) == 0);
  CHECK(published_lines(dir.file("out")) == before);
}

TEST_CASE("an unknown nexmark query or zero events is refused by build_query, naming what exists", "[nexmark][queries]") {
  dataflow::job_builder job("nexmark");
  auto spec = spec_of("q99", 0, 10, 1, "");
  CHECK_THROWS_WITH(nexmark::build_query(job, spec), Catch::Contains("q99") && Catch::Contains("q0, q1, q2, q3, q4, q5, q7, q8"));
  spec.query = "q1";
  spec.events = 0;
  dataflow::job_builder job2("nexmark");
  CHECK_THROWS_WITH(nexmark::build_query(job2, spec), Catch::Contains("events"));
  spec.events = 10;
  spec.state_ttl_ms = 1'000;
  dataflow::job_builder job3("nexmark");
  CHECK_THROWS_WITH(nexmark::build_query(job3, spec), Catch::Contains("applies to q3"));
}
