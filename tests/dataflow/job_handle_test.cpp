// A job in the host's own engine (job_handle.hpp) and the stop with a final checkpoint (drain,
// runner_stop.cpp): ready() says what the job resumed from, stats() is live, stop(drain) ends the
// job with exit code 0 and the checkpoint it took, the next run resumes from exactly there, stop(now)
// ends it at once, and the host's engine and its own coroutines run on throughout.

#include <sluice/dataflow/job_handle.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>

using namespace sluice::dataflow;
using namespace std::chrono_literals;
using sluice::test::expected_counts;
using sluice::test::published_lines;
using sluice::test::temp_dir;
using sluice::test::write_corpus_file;
namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;

namespace {

constexpr std::uint64_t window = 1000;  // windowed counts: output is published while the job runs

struct windowed_job {
  temp_dir dir;
  std::uint64_t lines;
  explicit windowed_job(std::uint64_t n, std::uint64_t seed) : lines(n) { write_corpus_file(input(), n, seed); }
  std::string input() const { return dir.file("input.txt"); }
  std::string output() const { return dir.file("out"); }
  // A fresh graph each run (a graph is built once per run, as the tool does).
  job_builder graph() const {
    job_builder job("wordcount");
    build_wordcount(job, {input(), output(), 2, window});
    return job;
  }
  job_settings settings() const {
    job_settings s;
    s.checkpoint_dir = dir.file("chk");
    s.checkpoint_interval = 20ms;
    return s;
  }
};

// Host side: a coroutine of the host's, ticking on executor 1 until told to stop.
struct host_ticks {  // written on executor 1, read by the test's thread
  std::atomic<std::uint64_t> count{0};
  std::atomic<bool> stop{false};
};
rt::task<void> tick(host_ticks* t) {
  while (!t->stop) {
    ++t->count;
    co_await rt::sleep_for(1ms);
  }
}

struct drained_run {
  std::optional<job_ready> ready;
  std::uint64_t source_records_seen = 0;
  job_result result;
};

// On executor 0: waits until the job is ready and has read something and completed a checkpoint,
// then drains it.
rt::task<drained_run> drain_when_running(job_handle job) {
  drained_run run;
  run.ready = co_await job.ready();
  if (run.ready) {
    for (int i = 0; i < 2000; ++i) {
      job_progress p = co_await job.stats();
      run.source_records_seen = p.source_records;
      if (p.source_records > 0 && p.checkpoints_completed >= 1) break;
      co_await rt::sleep_for(2ms);
    }
    job.stop(stop_mode::drain);
  }
  run.result = co_await job.wait();
  co_return run;
}

rt::task<job_result> run_to_end(job_handle job, std::optional<job_ready>* ready) {
  *ready = co_await job.ready();
  co_return co_await job.wait();
}

}  // namespace

TEST_CASE("a job in the host's engine drains to a checkpoint, exit 0, and the next start resumes from it exactly") {
  windowed_job w(300'000, 11);
  host_ticks ticks;  // (before the engine: outlives the coroutine that ticks it)
  rt::engine eng({.executors = 2, .handle_signals = false});
  rt::spawn_on(eng.at(1), tick(&ticks));

  job_builder first = w.graph();
  job_handle job = start_job(eng, first, w.settings());
  const drained_run run = eng.block_on(drain_when_running(job));
  INFO(run.result.message);
  REQUIRE(run.ready.has_value());
  CHECK_FALSE(run.ready->resumed_from.has_value());  // a fresh start
  CHECK(run.source_records_seen > 0);                // stats() is live
  REQUIRE(run.result.exit_code == 0);
  REQUIRE(run.result.stopped_at.has_value());
  CHECK_THAT(run.result.message, Catch::Contains("stopped with checkpoint " + std::to_string(*run.result.stopped_at)));
  CHECK(run.result.final.source_records < w.lines);  // it stopped before the input's end
  CHECK(run.result.leaked_segments == 0);
  // What the drain's checkpoint covers is published already: some windows, none of them twice.
  const std::vector<std::string> expected = expected_counts(w.input(), window);
  const std::vector<std::string> after_drain = published_lines(w.output());
  CHECK_FALSE(after_drain.empty());
  CHECK(after_drain.size() < expected.size());
  CHECK(std::includes(expected.begin(), expected.end(), after_drain.begin(), after_drain.end()));
  const std::uint64_t ticks_then = ticks.count.load();
  CHECK(ticks_then > 0);  // the host's coroutine ran beside the job

  // The next start, in the same engine, resumes from the drain's checkpoint and finishes exactly.
  job_builder second = w.graph();
  std::optional<job_ready> ready;
  const job_result r2 = eng.block_on(run_to_end(start_job(eng, second, w.settings()), &ready));
  INFO(r2.message);
  REQUIRE(ready.has_value());
  CHECK(ready->resumed_from == run.result.stopped_at);
  CHECK(r2.resumed_from == run.result.stopped_at);
  CHECK(r2.exit_code == 0);
  CHECK_FALSE(r2.stopped_at.has_value());  // it finished its input
  CHECK(published_lines(w.output()) == expected);
  CHECK(ticks.count > ticks_then);  // and the host's coroutine still runs
  ticks.stop = true;
}

TEST_CASE("stop(now) ends a job in the host's engine with exit 130 and join() works from another thread") {
  windowed_job w(300'000, 12);
  rt::engine eng({.executors = 2, .handle_signals = false});
  job_builder first = w.graph();
  std::optional<ss::checkpoint_id> resumed;
  bool readied = false;
  job_settings s = w.settings();
  s.on_ready = [&readied](std::optional<ss::checkpoint_id>) { readied = true; };  // the host's callback still runs
  bool stopping_reported = false;
  s.on_stopping = [&stopping_reported](stop_mode m) { stopping_reported = m == stop_mode::now; };
  job_handle job = start_job(eng, first, std::move(s));
  std::thread stopper([job] {
    std::this_thread::sleep_for(300ms);
    job.stop(stop_mode::now);
  });
  const job_result r = job.join();
  stopper.join();
  INFO(r.message);
  CHECK(r.exit_code == 130);
  CHECK_FALSE(r.stopped_at.has_value());
  CHECK(readied);
  CHECK(stopping_reported);
  // The engine is the host's and runs on.
  const int answer = eng.block_on([]() -> rt::task<int> { co_return 42; }());
  CHECK(answer == 42);
  // The next run resumes from the latest completed checkpoint (if one completed) and ends exact.
  const job_result r2 = run_job(first, w.settings());
  INFO(r2.message);
  CHECK(r2.exit_code == 0);
  CHECK(published_lines(w.output()) == expected_counts(w.input(), window));
}

TEST_CASE("stops asked for before the job is ready: now ends it before any task runs, drain once they run") {
  windowed_job w(200'000, 13);
  rt::engine eng({.executors = 2, .handle_signals = false});
  SECTION("now") {
    job_builder g = w.graph();
    job_handle job = start_job(eng, g, w.settings());
    job.stop(stop_mode::now);
    std::optional<job_ready> ready;
    const job_result r = eng.block_on(run_to_end(job, &ready));
    INFO(r.message);
    CHECK(r.exit_code == 130);
    CHECK(published_lines(w.output()).empty());
  }
  SECTION("drain") {
    job_builder g = w.graph();
    job_handle job = start_job(eng, g, w.settings());
    job.stop(stop_mode::drain);
    std::optional<job_ready> ready;
    const job_result r = eng.block_on(run_to_end(job, &ready));
    INFO(r.message);
    CHECK(ready.has_value());
    CHECK(r.exit_code == 0);
    CHECK(r.stopped_at.has_value());
    job_builder again = w.graph();
    const job_result r2 = run_job(again, w.settings());
    INFO(r2.message);
    CHECK(r2.resumed_from == r.stopped_at);
    CHECK(r2.exit_code == 0);
    CHECK(published_lines(w.output()) == expected_counts(w.input(), window));
  }
}

TEST_CASE("run_job's drain token stops with a final checkpoint, and a drain asked for at the input's end just finishes") {
  windowed_job w(300'000, 14);
  std::stop_source drain;
  job_settings s = w.settings();
  s.drain = drain.get_token();
  s.on_progress = [&drain](const job_progress& p) {
    if (p.checkpoints_completed >= 1 && p.source_records > 0) drain.request_stop();
  };
  job_builder g = w.graph();
  const job_result r = run_job(g, s);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.stopped_at.has_value());
  job_builder again = w.graph();
  job_settings s2 = w.settings();
  std::stop_source late;
  s2.drain = late.get_token();
  s2.on_checkpoint = [&late](const ss::checkpoint_stats&) { late.request_stop(); };  // at every checkpoint
  const job_result r2 = run_job(again, s2);
  INFO(r2.message);
  CHECK(r2.resumed_from == r.stopped_at);
  CHECK(r2.exit_code == 0);
  // Either it drained again (then a third run finishes) or its input had ended: never output twice.
  if (r2.stopped_at) {
    job_builder third = w.graph();
    const job_result r3 = run_job(third, w.settings());
    CHECK(r3.exit_code == 0);
  }
  CHECK(published_lines(w.output()) == expected_counts(w.input(), window));
}

TEST_CASE("a job in the host's engine: refusals, and what start_job refuses") {
  windowed_job w(1000, 15);
  rt::engine eng({.executors = 2, .handle_signals = false});
  job_builder g = w.graph();
  job_settings s = w.settings();
  s.handle_signals = true;
  CHECK_THROWS_AS(start_job(eng, g, s), std::invalid_argument);
  s = w.settings();
  s.executors = 3;
  CHECK_THROWS_AS(start_job(eng, g, s), std::invalid_argument);
  // Another job's checkpoint directory: refused (exit 2), and ready() says it never ran.
  job_builder other("another");
  build_wordcount(other, {w.input(), w.dir.file("out2"), 2, 0});
  REQUIRE(run_job(other, w.settings()).exit_code == 0);
  std::optional<job_ready> ready;
  const job_result r = eng.block_on(run_to_end(start_job(eng, g, w.settings()), &ready));
  INFO(r.message);
  CHECK(r.exit_code == 2);
  CHECK_FALSE(ready.has_value());
}
