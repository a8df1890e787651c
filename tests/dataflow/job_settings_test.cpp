// job_settings an embedding host sets (job_runner.hpp): checkpoints that fail in a row fail the job
// once more than tolerable_checkpoint_failures did, with the last one's reason; min_pause spaces
// the triggers; log_sink takes the job's log lines instead of stderr; on_ready says when the job
// runs and what it resumed; progress reports the input read; bad values are refused.

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/log.hpp>

#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using namespace std::chrono_literals;
using sluice::test::expected_counts;
using sluice::test::published_lines;
using sluice::test::temp_dir;
using sluice::test::write_corpus_file;
namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;

namespace {

job_settings quick_settings(const temp_dir& dir) {
  job_settings s;
  s.checkpoint_dir = dir.file("chk");
  s.checkpoint_interval = 10ms;
  s.handle_signals = false;
  return s;
}

// A word count over `lines` generated lines (none: no input file) at parallelism 2, checkpoints
// every 10 ms; a test changes `settings`, then run()s it.
struct wordcount_job {
  temp_dir dir;
  job_builder job{"wordcount"};
  job_settings settings = quick_settings(dir);
  explicit wordcount_job(std::uint64_t lines, std::uint64_t seed) {
    if (lines > 0) write_corpus_file(input(), lines, seed);
    build_wordcount(job, {input(), output(), 2, 0});
  }
  std::string input() const { return dir.file("input.txt"); }
  std::string output() const { return dir.file("out"); }
  job_result run() { return run_job(job, settings); }
};

}  // namespace

TEST_CASE("checkpoints that fail in a row beyond tolerable_checkpoint_failures fail the job with the last reason") {
  wordcount_job w(400'000, 5);
  job_settings& s = w.settings;
  s.checkpoint_timeout = 1ms;  // no checkpoint completes in time: each one expires
  s.min_pause = 0ms;
  s.tolerable_checkpoint_failures = 2;
  std::vector<ss::checkpoint_stats> ended;
  s.on_checkpoint = [&ended](const ss::checkpoint_stats& c) { ended.push_back(c); };  // still called
  const job_result r = w.run();
  INFO(r.message);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.message, Catch::Contains("3 checkpoints in a row failed (job_settings::tolerable_checkpoint_failures "
                                        "is 2)") &&
                            Catch::Contains("expired"));
  REQUIRE(ended.size() >= 3);
  CHECK_FALSE(ended[0].outcome.completed());
  CHECK(published_lines(w.output()).empty());  // nothing completed: nothing published
}

TEST_CASE("min_pause spaces one checkpoint's end from the next trigger, and the output stays exact") {
  wordcount_job w(300'000, 6);
  job_settings& s = w.settings;
  s.min_pause = 150ms;
  std::vector<ss::checkpoint_stats> ended;
  s.on_checkpoint = [&ended](const ss::checkpoint_stats& c) { ended.push_back(c); };
  const job_result r = w.run();
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(w.output()) == expected_counts(w.input()));
  // Every periodic trigger came at least min_pause after the previous checkpoint ended (the final
  // checkpoint, triggered at the end of the data, does not wait).
  for (std::size_t i = 1; i + 1 < ended.size(); ++i) {
    const auto previous_end = ended[i - 1].triggered_at + ended[i - 1].duration;
    CHECK(ended[i].triggered_at - previous_end >= 150ms);
  }
}

TEST_CASE("log_sink takes the job's log lines instead of stderr while it runs") {
  wordcount_job w(20'000, 7);
  job_settings& s = w.settings;
  std::mutex m;
  std::vector<std::string> lines;
  std::vector<int> executors;
  s.log_sink = [&](const rt::log::event& e) {
    std::lock_guard lock(m);
    lines.emplace_back(e.text);
    executors.push_back(e.executor);
  };
  const rt::log_level saved = rt::log::level();
  rt::log::set_level(rt::log_level::info);
  const job_result r = w.run();
  rt::log::set_level(saved);
  REQUIRE(r.exit_code == 0);
  std::lock_guard lock(m);
  bool completed_line = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("completed:") != std::string::npos && lines[i].rfind("checkpoint ", 0) == 0) {
      completed_line = true;
      CHECK(executors[i] == 0);  // the coordinator's executor
    }
  }
  CHECK(completed_line);
}

TEST_CASE("a negative min_pause and retained_checkpoints 0 are refused") {
  wordcount_job w(0, 0);
  job_settings& s = w.settings;
  s.min_pause = -1ms;
  CHECK_THROWS_WITH(w.run(), Catch::Contains("min_pause -1 ms"));
  s.min_pause.reset();
  s.retained_checkpoints = 0;
  CHECK_THROWS_WITH(w.run(), Catch::Contains("retained_checkpoints must be at least 1"));
}

TEST_CASE("a job that needs more network memory than network_memory_limit_bytes is refused before it starts, with the numbers") {
  wordcount_job w(10, 1);
  job_settings& s = w.settings;
  s.network_memory_limit_bytes = 1 << 20;  // the word count at parallelism 2 on 2 executors needs 2.9 MiB
  CHECK_THROWS_WITH(w.run(), Catch::Contains("needs 2.9 MiB of network memory, over the limit of 1.0 MiB") &&
                                 Catch::Contains("2 executors x 46 segments x 32 KiB") &&
                                 Catch::Contains("raise --network-memory to at least 2.9 MiB"));
  CHECK_FALSE(std::filesystem::exists(w.output()));  // refused before anything was made
  CHECK_FALSE(std::filesystem::exists(s.checkpoint_dir));
  s.network_memory_limit_bytes = 1024;  // below one segment
  CHECK_THROWS_WITH(w.run(), Catch::Contains("below one segment"));
  s.network_memory_limit_bytes = std::size_t{1} << 30;
  CHECK(w.run().exit_code == 0);
}

TEST_CASE("progress reports how far the sources read their files, what they produced and what the sinks wrote") {
  wordcount_job w(200'000, 8);
  job_settings& s = w.settings;
  s.progress_interval = 5ms;
  std::vector<job_progress> samples;
  s.on_progress = [&samples](const job_progress& p) { samples.push_back(p); };
  const job_result r = w.run();
  REQUIRE(r.exit_code == 0);
  const std::uint64_t size = std::filesystem::file_size(w.input());
  CHECK(r.final.input_total == size);  // the two sources' ranges cover the file
  CHECK(r.final.input_done == size);
  CHECK(r.final.source_records == 200'000);  // one record per line
  CHECK(r.final.records_written == expected_counts(w.input()).size());  // one line per word
  REQUIRE_FALSE(samples.empty());
  for (std::size_t i = 1; i < samples.size(); ++i) CHECK(samples[i].input_done >= samples[i - 1].input_done);
  CHECK(samples.front().input_done <= size);
}

TEST_CASE("on_ready is called once, before any record is counted, with the checkpoint the job resumed from") {
  temp_dir dir;
  write_corpus_file(dir.file("input.txt"), 50'000, 9);
  std::vector<std::optional<ss::checkpoint_id>> ready;
  std::uint64_t progress_before_ready = 0;
  const auto run_once = [&] {
    job_builder job("wordcount");
    build_wordcount(job, {dir.file("input.txt"), dir.file("out"), 2, 0});
    job_settings s = quick_settings(dir);
    s.progress_interval = 1ms;
    s.on_progress = [&](const job_progress&) {
      if (ready.empty()) ++progress_before_ready;
    };
    s.on_ready = [&](std::optional<ss::checkpoint_id> from) { ready.push_back(from); };
    return run_job(job, s);
  };
  REQUIRE(run_once().exit_code == 0);
  REQUIRE(ready.size() == 1);
  CHECK_FALSE(ready[0].has_value());  // a fresh start
  CHECK(progress_before_ready == 0);  // progress is reported only once the job runs
  const job_result again = run_once();  // over the finished job: resumes from its final checkpoint
  REQUIRE(again.exit_code == 0);
  REQUIRE(ready.size() == 2);
  REQUIRE(ready[1].has_value());
  CHECK(ready[1] == again.resumed_from);
}
