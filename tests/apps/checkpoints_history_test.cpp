// `sluice checkpoints DIR` shows the checkpoint history a job kept (checkpoints_history.hpp): the
// recent checkpoints, the last completed one per task, the starts with what they resumed from, and
// the counts; --json the same as JSON; a directory without a history says so.

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>

#include <dataflow/wordcount_support.hpp>
#include <support/temp_dir.hpp>

#include "run_sluice.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using sluice::test::run_sluice;
using sluice::test::temp_dir;
namespace df = sluice::dataflow;

namespace {

df::job_result run_wordcount(const temp_dir& dir) {
  df::job_builder job("wordcount");
  df::build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, 0});
  df::job_settings settings;
  settings.checkpoint_dir = dir.file("chk");
  settings.checkpoint_interval = 10ms;
  settings.handle_signals = false;
  return df::run_job(job, settings);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("sluice checkpoints DIR shows the history of two runs: checkpoints, per-task breakdown, restores, counts") {
  temp_dir dir;
  sluice::test::write_corpus_file(dir.file("input.txt"), 20'000, 3);
  const df::job_result first = run_wordcount(dir);
  INFO(first.message);
  REQUIRE(first.exit_code == 0);
  const df::job_result second = run_wordcount(dir);
  INFO(second.message);
  REQUIRE(second.exit_code == 0);
  REQUIRE(second.resumed_from.has_value());

  const sluice::test::tool_run r = run_sluice({"checkpoints", dir.file("chk")});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("History (history.jsonl: "));
  CHECK_THAT(r.out, Catch::Contains("TRIGGERED (UTC)") && Catch::Contains("ALIGNMENT") && Catch::Contains("OUTCOME"));
  CHECK_THAT(r.out, Catch::Contains("Last completed checkpoint " + std::to_string(second.final.last_checkpoint) +
                                    ", per task:"));
  CHECK_THAT(r.out, Catch::Contains("START DELAY") && Catch::Contains("FSYNC"));
  // One row per task of the last checkpoint (wordcount at parallelism 2 names them stage#subtask).
  std::size_t task_rows = 0;
  bool in_tasks = false;
  for (const std::string& line : lines_of(r.out)) {
    if (line.rfind("TASK ", 0) == 0) {
      in_tasks = true;
      continue;
    }
    if (in_tasks && line.empty()) break;
    if (in_tasks) {
      ++task_rows;
      CHECK(line.find('#') != std::string::npos);
    }
  }
  CHECK(task_rows >= 4);
  CHECK_THAT(r.out, Catch::Contains("- (fresh start)"));
  CHECK_THAT(r.out, Catch::Contains("chk-" + std::to_string(*second.resumed_from)));
  CHECK_THAT(r.out, Catch::Contains("completed,") && Catch::Contains("2 starts, 1 restore"));

  const sluice::test::tool_run j = run_sluice({"checkpoints", dir.file("chk"), "--json"});
  INFO(j.out << j.err);
  REQUIRE(j.exit_code == 0);
  const std::vector<std::string> lines = lines_of(j.out);
  REQUIRE_FALSE(lines.empty());
  std::size_t starts = 0;
  std::size_t listed = 0;
  for (const std::string& line : lines) {
    const nlohmann::json o = nlohmann::json::parse(line);  // every line is JSON
    if (!o.contains("event")) {
      ++listed;  // a chk-<id> directory
      continue;
    }
    if (o["event"] == "start") ++starts;
  }
  CHECK(listed >= 1);
  CHECK(starts == 2);
  const nlohmann::json summary = nlohmann::json::parse(lines.back());
  CHECK(summary["event"] == "summary");
  CHECK(summary["restores"] == 1);
  CHECK(summary["completed"].get<std::size_t>() >= 2);
  CHECK(summary["last_completed"]["id"] == second.final.last_checkpoint);
  CHECK(summary["last_completed"]["task_breakdown"].size() == task_rows);
}

TEST_CASE("sluice checkpoints DIR says when the directory holds no history") {
  temp_dir dir;
  std::filesystem::create_directories(dir.file("chk"));
  const sluice::test::tool_run r = run_sluice({"checkpoints", dir.file("chk")});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("No checkpoint history in"));
  const sluice::test::tool_run j = run_sluice({"checkpoints", dir.file("chk"), "--json"});
  REQUIRE(j.exit_code == 0);
  CHECK(j.out.empty());
  CHECK_THAT(j.err, Catch::Contains("no checkpoint history"));
}
