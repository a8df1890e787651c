// The job's checkpoint history (job_history.hpp, snapshot/checkpoint_history.hpp): written in the
// checkpoint directory, kept across restarts and retention, bounded, with each checkpoint's per-task
// breakdown, abort reasons and aligned-to-unaligned switches; a torn last line or a file that
// cannot be written never fails the job.

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/snapshot/checkpoint_history.hpp>

#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stop_token>
#include <string>
#include <variant>
#include <vector>

using namespace sluice::dataflow;
using namespace std::chrono_literals;
using sluice::test::expected_counts;
using sluice::test::published_lines;
using sluice::test::temp_dir;
using sluice::test::write_corpus_file;
namespace ss = sluice::snapshot;
namespace fs = std::filesystem;

namespace {

struct wordcount_job {
  temp_dir dir;
  job_builder job{"wordcount"};
  job_settings settings;
  explicit wordcount_job(std::uint64_t lines, std::uint64_t seed) {
    write_corpus_file(input(), lines, seed);
    build_wordcount(job, {input(), output(), 2, 0});
    settings.checkpoint_dir = checkpoints();
    settings.checkpoint_interval = 10ms;
    settings.handle_signals = false;
  }
  std::string input() const { return dir.file("input.txt"); }
  std::string output() const { return dir.file("out"); }
  std::string checkpoints() const { return dir.file("chk"); }
  std::string history_file() const { return checkpoints() + "/history.jsonl"; }
  job_result run() { return run_job(job, settings); }
};

ss::history_contents read_history(const std::string& checkpoint_dir) {
  auto read = ss::read_history_blocking(checkpoint_dir);
  if (!read) FAIL(read.error().message());
  return std::move(read).value();
}

std::vector<const ss::history_checkpoint*> checkpoints_of(const ss::history_contents& h) {
  std::vector<const ss::history_checkpoint*> out;
  for (const auto& e : h.events) {
    if (const auto* c = std::get_if<ss::history_checkpoint>(&e)) out.push_back(c);
  }
  return out;
}

// The newest completed checkpoint's id (no_checkpoint if none). Not simply the last line's: a
// periodic checkpoint the final one cancelled may end, and be recorded, after it.
ss::checkpoint_id newest_completed_id(const ss::history_contents& h) {
  ss::checkpoint_id newest = ss::no_checkpoint;
  for (const ss::history_checkpoint* c : checkpoints_of(h)) {
    if (c->completed && c->id > newest) newest = c->id;
  }
  return newest;
}

std::vector<const ss::history_start*> starts_of(const ss::history_contents& h) {
  std::vector<const ss::history_start*> out;
  for (const auto& e : h.events) {
    if (const auto* s = std::get_if<ss::history_start>(&e)) out.push_back(s);
  }
  return out;
}

std::size_t file_lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// source -> map -> slow sink (1 ms a record), aligned with a 2 ms alignment timeout: the buffers
// stay full, so the sources' in-band barriers are still queued when the timeout passes and the
// checkpoints switch to unaligned (as generate_test's switch test). Stops after `checkpoints` ended.
job_result run_backpressured(const temp_dir& dir, std::size_t checkpoints, std::size_t history_entries,
                             std::vector<ss::checkpoint_stats>* ended) {
  job_builder job("switch");
  const auto key = [](const std::uint64_t& n) { return n; };
  job.generate<std::uint64_t>("gen", 2, 0, [](std::uint64_t n) { return n; })
      .key_by<std::uint64_t>(key)
      .partition("map", 2)
      .map<std::uint64_t>([](const std::uint64_t& n) { return n + 1; })
      .key_by<std::uint64_t>(key)
      .partition("sink", 2)
      .write_lines(dir.file("out"), [](const std::uint64_t& n) { return std::to_string(n); },
                   sink_options{std::chrono::microseconds(1000)});
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.checkpoint_interval = 20ms;
  settings.handle_signals = false;
  settings.mode = ss::checkpoint_mode::aligned_timeout;
  settings.alignment_timeout = 2ms;
  settings.checkpoint_history_entries = history_entries;
  std::stop_source stop;
  settings.stop = stop.get_token();
  settings.on_checkpoint = [&](const ss::checkpoint_stats& c) {
    ended->push_back(c);
    if (ended->size() >= checkpoints) stop.request_stop();
  };
  return run_job(job, settings);
}

}  // namespace

TEST_CASE("the history survives a restart: both runs' checkpoints and a start naming the checkpoint resumed from") {
  wordcount_job w(30'000, 11);
  w.settings.retained_checkpoints = 1;  // retention deletes checkpoints, never the history
  const job_result first = w.run();
  INFO(first.message);
  REQUIRE(first.exit_code == 0);
  const ss::history_contents after_first = read_history(w.checkpoints());
  const std::size_t first_events = after_first.events.size();
  const auto first_checkpoints = checkpoints_of(after_first);
  REQUIRE_FALSE(first_checkpoints.empty());
  const ss::checkpoint_id last_of_first = newest_completed_id(after_first);  // the final checkpoint
  REQUIRE(last_of_first != ss::no_checkpoint);

  const job_result second = w.run();
  INFO(second.message);
  REQUIRE(second.exit_code == 0);
  REQUIRE(second.resumed_from == std::optional<ss::checkpoint_id>(last_of_first));
  CHECK(published_lines(w.output()) == expected_counts(w.input()));

  const ss::history_contents h = read_history(w.checkpoints());
  CHECK(h.skipped_lines == 0);
  REQUIRE(h.events.size() > first_events);
  const auto starts = starts_of(h);
  REQUIRE(starts.size() == 2);
  CHECK(starts[0]->job == "wordcount");
  CHECK_FALSE(starts[0]->resumed_from.has_value());
  CHECK(starts[1]->resumed_from == std::optional<ss::checkpoint_id>(last_of_first));
  CHECK(starts[1]->restore_duration > 0ns);
  CHECK(starts[1]->unix_ms >= starts[0]->unix_ms);
  // The first event is the first start; the second start comes after every checkpoint of the first
  // run, and the second run's final checkpoint after it, with a newer id.
  CHECK(std::holds_alternative<ss::history_start>(h.events.front()));
  CHECK(std::holds_alternative<ss::history_start>(h.events[first_events]));
  const ss::checkpoint_id final_of_second = newest_completed_id(h);
  CHECK(final_of_second > last_of_first);
  for (std::size_t i = first_events; i < h.events.size(); ++i) {
    if (const auto* c = std::get_if<ss::history_checkpoint>(&h.events[i])) {
      INFO("checkpoint " << c->id << " " << c->reason);
      CHECK(c->id > last_of_first);
      if (!c->completed) CHECK(c->id < final_of_second);  // only periodic ones the final one overtook
    }
  }
  CHECK(fs::exists(w.history_file()));
}

TEST_CASE("each completed checkpoint has one breakdown entry per task, with sane values") {
  wordcount_job w(30'000, 12);
  std::vector<ss::checkpoint_stats> ended;
  w.settings.on_checkpoint = [&ended](const ss::checkpoint_stats& c) { ended.push_back(c); };
  const job_result r = w.run();
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  REQUIRE_FALSE(ended.empty());
  for (const ss::checkpoint_stats& c : ended) {
    if (!c.outcome.completed()) continue;
    REQUIRE(c.task_breakdown.size() == c.tasks);
    std::uint64_t op = 0;
    for (const ss::task_checkpoint_breakdown& t : c.task_breakdown) {
      REQUIRE(t.start_delay.has_value());  // one process: every task's clock is the trigger's
      CHECK(*t.start_delay >= 0ns);
      CHECK(*t.start_delay <= c.duration);
      CHECK(t.alignment_duration >= 0ns);
      CHECK(t.write_duration >= 0ns);
      CHECK(t.fsync_duration >= 0ns);
      CHECK(t.write_duration + t.fsync_duration <= c.duration);
      CHECK_FALSE(t.switched_to_unaligned);  // aligned: never a switch
      op += t.operator_state_bytes;
    }
    CHECK(op == c.operator_state_bytes);
  }
  // The file holds the same breakdown, with the tasks' names, one per task id.
  const ss::history_contents h = read_history(w.checkpoints());
  const auto chks = checkpoints_of(h);
  REQUIRE_FALSE(chks.empty());
  const ss::history_checkpoint& last = *chks.back();
  REQUIRE(last.completed);
  REQUIRE(last.task_breakdown.size() == last.tasks);
  std::vector<std::string> names;
  for (const ss::history_task& t : last.task_breakdown) {
    names.push_back(t.name);
    CHECK(t.start_delay.has_value());
    CHECK(t.fsync_duration > 0ns);  // every state file is fsynced
  }
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
  CHECK(std::count_if(names.begin(), names.end(), [](const std::string& n) { return n.find('#') != std::string::npos; }) ==
        static_cast<long>(names.size()));
}

TEST_CASE("an aborted checkpoint's reason is in the history: a tiny checkpoint_timeout gives expired") {
  wordcount_job w(400'000, 5);
  w.settings.checkpoint_timeout = 1ms;
  w.settings.min_pause = 0ms;
  w.settings.tolerable_checkpoint_failures = 2;
  const job_result r = w.run();
  INFO(r.message);
  REQUIRE(r.exit_code == 1);  // the job fails; its history is written all the same
  const ss::history_contents h = read_history(w.checkpoints());
  const auto chks = checkpoints_of(h);
  REQUIRE(chks.size() >= 3);
  for (const ss::history_checkpoint* c : chks) {
    CHECK_FALSE(c->completed);
  }
  const ss::history_summary s = ss::summarize(h.events);
  REQUIRE(s.aborted_by_reason.count("expired") == 1);
  CHECK(s.aborted_by_reason.at("expired") >= 3);
  CHECK(s.completed == 0);
  const auto expired = std::find_if(chks.begin(), chks.end(), [](const auto* c) { return c->reason == "expired"; });
  REQUIRE(expired != chks.end());
  CHECK_FALSE((*expired)->detail.empty());
}

TEST_CASE("a switch from aligned to unaligned under backpressure is recorded, with the tasks that switched") {
  temp_dir dir;
  std::vector<ss::checkpoint_stats> ended;
  const job_result r = run_backpressured(dir, 4, 1000, &ended);
  INFO(r.message);
  REQUIRE(r.exit_code == 130);
  const ss::history_contents h = read_history(dir.file("checkpoints"));
  const ss::history_summary s = ss::summarize(h.events);
  REQUIRE(s.switched_to_unaligned >= 1);
  bool source_switched = false;
  for (const ss::history_checkpoint* c : checkpoints_of(h)) {
    CHECK(c->mode == ss::checkpoint_mode::aligned_timeout);
    for (const ss::history_task& t : c->task_breakdown) {
      if (t.switched_to_unaligned && t.name.rfind("gen#", 0) == 0) source_switched = true;
    }
  }
  // The sources have no input to time out on: their switch is the output-side one.
  CHECK(source_switched);
}

TEST_CASE("the history is bounded: past 2N lines it keeps the newest N") {
  temp_dir dir;
  std::vector<ss::checkpoint_stats> ended;
  const job_result r = run_backpressured(dir, 16, 3, &ended);
  INFO(r.message);
  REQUIRE(r.exit_code == 130);
  REQUIRE(ended.size() >= 16);  // 17+ lines written with the start: at least two compactions
  const std::string path = dir.file("checkpoints/history.jsonl");
  const std::size_t lines = file_lines(path);
  CHECK(lines >= 3);
  CHECK(lines <= 6);
  CHECK_FALSE(fs::exists(dir.file("checkpoints/history.jsonl.tmp")));
  const ss::history_contents h = read_history(dir.file("checkpoints"));
  CHECK(h.skipped_lines == 0);
  const auto chks = checkpoints_of(h);
  REQUIRE_FALSE(chks.empty());
  CHECK(chks.back()->id == ended.back().id);  // the newest survive, in order
  for (std::size_t i = 1; i < chks.size(); ++i) CHECK(chks[i - 1]->id < chks[i]->id);
}

TEST_CASE("a torn last line left by a crash is skipped, and the next run's lines stay whole") {
  wordcount_job w(20'000, 13);
  fs::create_directories(w.checkpoints());
  {
    std::ofstream out(w.history_file(), std::ios::binary);
    out << "{\"v\":1,\"event\":\"checkpoint\",\"id\":3,\"mo";  // cut mid-append
  }
  const job_result r = w.run();
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  const ss::history_contents h = read_history(w.checkpoints());
  CHECK(h.skipped_lines == 1);  // the torn line only: the start did not glue onto it
  REQUIRE(starts_of(h).size() == 1);
  CHECK(std::holds_alternative<ss::history_start>(h.events.front()));
  CHECK_FALSE(checkpoints_of(h).empty());
}

TEST_CASE("a history file that cannot be written (a full disk, a directory in its place) never fails the job") {
  const bool full_disk = GENERATE(true, false);
  wordcount_job w(20'000, 14);
  fs::create_directories(w.checkpoints());
  if (full_disk) {
    fs::create_symlink("/dev/full", w.history_file());  // every write: ENOSPC
  } else {
    fs::create_directory(w.history_file());  // open: EISDIR (as root too)
  }
  std::mutex m;
  std::vector<std::string> warnings;
  w.settings.log_sink = [&](const sluice::runtime::log::event& e) {
    if (e.text.find("checkpoint history") == std::string_view::npos) return;
    std::lock_guard lock(m);
    warnings.emplace_back(e.text);
  };
  const job_result r = w.run();
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(r.final.checkpoints_completed >= 1);
  CHECK(published_lines(w.output()) == expected_counts(w.input()));
  std::lock_guard lock(m);
  REQUIRE(warnings.size() == 1);  // logged once, however many lines failed
  CHECK_THAT(warnings[0], Catch::Contains(full_disk ? "No space left on device" : "Is a directory"));
}

TEST_CASE("checkpoint_history_entries = 0 writes no history") {
  wordcount_job w(5'000, 15);
  w.settings.checkpoint_history_entries = 0;
  const job_result r = w.run();
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(fs::exists(w.history_file()));
}
