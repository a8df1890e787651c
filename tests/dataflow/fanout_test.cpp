// Fan-out: one stream taken by several operators, feeding several stages or both inputs of one
// join (fanout.hpp): every branch gets every record, once, across checkpoints and SIGKILLs; the plan
// gives each port its own subpartitions; a sink beside another output is refused.

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/join.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <support/temp_dir.hpp>

#include "crash_support.hpp"
#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::published_lines;
using sluice::test::temp_dir;

namespace {

using u64 = std::uint64_t;
using partial = std::pair<u64, u64>;

std::string key_count(const u64& k, const u64& n) { return std::to_string(k) + " " + std::to_string(n); }

// gen -> (n mod 7: count) and (even n, n mod 5: sum), two keyed stages fed by one source stage.
void build_two_consumers(job_builder& job, const temp_dir& dir, u64 count, std::size_t p) {
  auto numbers = job.generate<u64>("gen", 2, count, [](u64 n) { return n; });
  numbers.key_by<u64>([](const u64& n) { return n % 7; })
      .aggregate<u64, std::string>("count", p, [](u64& c, const u64&) { ++c; }, key_count)
      .write_lines(dir.file("a"), [](const std::string& l) { return l; });
  numbers.filter([](const u64& n) { return n % 2 == 0; })
      .key_by<u64>([](const u64& n) { return n % 5; })
      .aggregate<u64, std::string>("sum", p + 1, [](u64& s, const u64& n) { s += n; }, key_count)
      .write_lines(dir.file("b"), [](const std::string& l) { return l; });
}

std::vector<std::string> expected_two_consumers(u64 count, bool sums) {
  std::map<u64, u64> m;
  for (u64 n = 0; n < count; ++n) {
    if (!sums) ++m[n % 7];
    if (sums && n % 2 == 0) m[n % 5] += n;
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(key_count(k, v));
  std::sort(out.begin(), out.end());
  return out;
}

// A combiner before the fan-out and one in a branch: gen -> combine(n mod 100: count) -> tee ->
// (key total) and (key mod 10 -> combine -> total). A barrier must flush the upstream combiner into
// the branch's, and the branch's again, or what it held would be in no checkpoint.
void build_combined(job_builder& job, const temp_dir& dir, u64 count) {
  auto partials = job.generate<u64>("gen", 2, count, [](u64 n) { return n; }, 2e6)
                      .key_by<u64>([](const u64& n) { return n % 100; })
                      .combine<u64>([](u64& c, const u64&) { ++c; });
  partials.aggregate<u64, std::string>("per-key", 2, [](u64& c, const partial& p) { c += p.second; }, key_count)
      .write_lines(dir.file("a"), [](const std::string& l) { return l; });
  partials.upstream()
      .key_by<u64>([](const partial& p) { return p.first % 10; })
      .combine<u64>([](u64& c, const partial& p) { c += p.second; })
      .aggregate<u64, std::string>("per-decade", 2, [](u64& c, const partial& p) { c += p.second; }, key_count)
      .write_lines(dir.file("b"), [](const std::string& l) { return l; });
}

std::vector<std::string> expected_combined(u64 count, u64 modulus) {
  std::map<u64, u64> m;
  for (u64 n = 0; n < count; ++n) ++m[(n % 100) % modulus];
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(key_count(k, v));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a stream taken by two keyed stages gives each every record once", "[fanout]") {
  const std::string transport = GENERATE(std::string("local"), std::string("tcp"));
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned);
  const temp_dir dir;
  job_builder job("fanout");
  build_two_consumers(job, dir, 20'000, 2);
  REQUIRE(run_job(job, sluice::test::test_job_settings(dir.file("chk"), mode, transport)).exit_code == 0);
  CHECK(published_lines(dir.file("a")) == expected_two_consumers(20'000, false));
  CHECK(published_lines(dir.file("b")) == expected_two_consumers(20'000, true));
}

TEST_CASE("both inputs of a window join may be branches of one stream", "[fanout]") {
  const temp_dir dir;
  job_builder job("self-join");
  auto numbers = job.generate_timed<u64>("gen", 2, 2'000, [](u64 n) { return n; }, [](u64 n) { return n; });
  const auto key = [](const u64& n) { return n % 4; };
  numbers.filter([](const u64& n) { return n % 2 == 0; })
      .key_by<u64>(key)
      .window_join<u64, std::string>(
          numbers.filter([](const u64& n) { return n % 3 == 0; }).key_by<u64>(key), "join", 3, 50,
          [](const u64& n) { return n; }, [](const u64& n) { return n; },
          [](u64 start, const u64& k, const u64& l, const u64& r) {
            return std::to_string(start) + " " + std::to_string(k) + " " + std::to_string(l) + " " + std::to_string(r);
          })
      .write_lines(dir.file("out"), [](const std::string& l) { return l; });
  REQUIRE(run_job(job, sluice::test::test_job_settings(dir.file("chk"), checkpoint_mode::unaligned, "local"))
              .exit_code == 0);
  std::vector<std::string> expected;
  for (u64 l = 0; l < 2'000; l += 2) {
    for (u64 r = 0; r < 2'000; r += 3) {
      if (l % 4 == r % 4 && l / 50 == r / 50) {
        expected.push_back(std::to_string(l / 50 * 50) + " " + std::to_string(l % 4) + " " + std::to_string(l) + " " +
                           std::to_string(r));
      }
    }
  }
  std::sort(expected.begin(), expected.end());
  CHECK(expected.size() > 1'000);
  CHECK(published_lines(dir.file("out")) == expected);
}

TEST_CASE("combiners before and after a fan-out are flushed at every barrier, exactly once under SIGKILLs",
          "[fanout][crash]") {
  const temp_dir dir;
  const u64 count = 1'000'000;  // half a second at 2 M/s
  const auto job = [&dir, count] {
    job_builder built("fanout-combined");
    build_combined(built, dir, count);
    auto settings = sluice::test::test_job_settings(dir.file("chk"), checkpoint_mode::unaligned, "local");
    settings.checkpoint_interval = std::chrono::milliseconds(5);
    return run_job(built, settings).exit_code;
  };
  const auto reset = [&dir] {
    for (const char* d : {"a", "b", "chk"}) std::filesystem::remove_all(dir.file(d));
  };
  const auto report = sluice::test::run_until_done(job, reset, 20261204, 5, 150);
  CHECK(report.kills == 5);
  REQUIRE(report.exit_code == 0);
  CHECK(published_lines(dir.file("a")) == expected_combined(count, 100));
  CHECK(published_lines(dir.file("b")) == expected_combined(count, 10));
}

TEST_CASE("the plan gives each port of a fanned-out stage its own subpartitions", "[fanout]") {
  const temp_dir dir;
  job_builder job("fanout");
  build_two_consumers(job, dir, 10, 2);  // gen (2) -> count (2), sum (3)
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 1, .executors = 2});
  CHECK(plan.stages()[0].outputs == std::vector<output_port>{{1, 0, 0, 2}, {2, 0, 2, 3}});
  CHECK(plan.task(0).downstream_parallelism == 5);
  CHECK(plan.task(0).buffers.output == 3 * 5 + 8);
  std::set<std::pair<sluice::snapshot::task_id, std::uint32_t>> used;
  for (const task_plan& t : plan.tasks()) {
    for (const channel_plan& c : plan.inputs_of(t.id)) {
      CHECK(used.emplace(c.producer, c.subpartition).second);  // one consumer per subpartition
      CHECK(c.subpartition < plan.task(c.producer).downstream_parallelism);
    }
  }
  const std::vector<channel_plan> out = plan.outputs_of(1);
  REQUIRE(out.size() == 5);
  for (std::uint32_t i = 0; i < out.size(); ++i) {
    CHECK(out[i].subpartition == i);
    const auto in = plan.inputs_of(out[i].consumer);
    CHECK(in.at(out[i].gate_channel).producer == 1);
    CHECK(in.at(out[i].gate_channel).subpartition == i);
  }
}

TEST_CASE("a sink beside another output of its stage is refused, naming the stage", "[fanout]") {
  job_builder job("bad");
  auto numbers = job.generate<u64>("gen", 1, 10, [](u64 n) { return n; });
  numbers.write_lines("/nonexistent/a", [](const u64& n) { return std::to_string(n); });
  CHECK_THROWS_WITH(numbers.discard(), Catch::Contains("'gen'") && Catch::Contains("already has an output"));
  CHECK_THROWS_WITH(numbers.key_by<u64>([](const u64& n) { return n; }).partition("p", 1),
                    Catch::Contains("'gen'") && Catch::Contains("sink ends a stage alone"));
  job_builder other("bad2");
  auto more = other.generate<u64>("gen", 1, 10, [](u64 n) { return n; });
  more.key_by<u64>([](const u64& n) { return n; }).partition("p", 1).discard();
  CHECK_THROWS_WITH(more.print([](const u64& n) { return std::to_string(n); }), Catch::Contains("already has an output"));
}

TEST_CASE("a union takes every record of two source stages once, and its windows see both in time", "[fanout][union]") {
  const temp_dir dir;
  job_builder job("union");
  // Evens from one source, odds from another (times n), counted per tumbling window of 100.
  auto evens = job.generate_timed<u64>("evens", 2, 1'000, [](u64 n) { return 2 * n; }, [](u64 n) { return 2 * n; });
  auto odds = job.generate_timed<u64>("odds", 1, 1'000, [](u64 n) { return 2 * n + 1; }, [](u64 n) { return 2 * n + 1; });
  evens.union_with(odds, "both", 3)
      .key_by<u64>([](const u64& n) { return n % 3; })
      .window<u64, std::string>(
          "count", 2, 100, [](const u64& n) { return n; }, [](u64& c, const u64&) { ++c; },
          [](u64 start, const u64& k, const u64& c) { return std::to_string(start) + " " + key_count(k, c); })
      .write_lines(dir.file("out"), [](const std::string& l) { return l; });
  REQUIRE(run_job(job, sluice::test::test_job_settings(dir.file("chk"), checkpoint_mode::unaligned, "local"))
              .exit_code == 0);
  std::map<std::pair<u64, u64>, u64> counts;
  for (u64 n = 0; n < 2'000; ++n) ++counts[{n / 100 * 100, n % 3}];
  std::vector<std::string> expected;
  for (const auto& [w, c] : counts) expected.push_back(std::to_string(w.first) + " " + key_count(w.second, c));
  std::sort(expected.begin(), expected.end());
  CHECK(published_lines(dir.file("out")) == expected);  // no window fired before both sources passed it
}

TEST_CASE("a union of two branches of one stream reads that stage twice", "[fanout][union]") {
  const temp_dir dir;
  job_builder job("self-union");
  auto numbers = job.generate<u64>("gen", 2, 5'000, [](u64 n) { return n; });
  numbers.filter([](const u64& n) { return n % 2 == 0; })
      .union_with(numbers.filter([](const u64& n) { return n % 3 == 0; }), "both", 2)
      .write_lines(dir.file("out"), [](const u64& n) { return std::to_string(n); });
  REQUIRE(run_job(job, sluice::test::test_job_settings(dir.file("chk"), checkpoint_mode::aligned, "tcp")).exit_code == 0);
  std::vector<std::string> expected;
  for (u64 n = 0; n < 5'000; ++n) {
    if (n % 2 == 0) expected.push_back(std::to_string(n));
    if (n % 3 == 0) expected.push_back(std::to_string(n));  // multiples of 6 twice: once per branch
  }
  std::sort(expected.begin(), expected.end());
  CHECK(published_lines(dir.file("out")) == expected);
}
