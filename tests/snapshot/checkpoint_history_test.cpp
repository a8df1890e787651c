// The checkpoint history file's format and reader (checkpoint_history.hpp): lines round-trip, a
// torn last line and garbage lines are skipped and counted, never fatal, and the summary counts.

#include <sluice/snapshot/checkpoint_history.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <variant>

namespace ss = sluice::snapshot;
using namespace std::chrono_literals;

namespace {

ss::history_checkpoint sample_checkpoint(ss::checkpoint_id id, bool completed) {
  ss::history_checkpoint c;
  c.id = id;
  c.mode = ss::checkpoint_mode::aligned_timeout;
  c.triggered_unix_ms = 1'764'657'000'123;
  c.duration = 12'345'678ns;
  c.max_alignment_duration = 2'000'000ns;
  c.operator_state_bytes = 4096;
  c.channel_state_bytes = 512;
  c.tasks = 2;
  c.acknowledged = completed ? 2 : 1;
  c.completed = completed;
  if (!completed) {
    c.reason = "expired";
    c.detail = "checkpoint 3 was not acknowledged within 1 ms";
  }
  ss::history_task a;
  a.task = 0;
  a.name = "gen#0";
  a.start_delay = 150'000ns;
  a.alignment_duration = 0ns;
  a.write_duration = 800'000ns;
  a.fsync_duration = 300'000ns;
  a.operator_state_bytes = 4000;
  a.channel_state_bytes = 512;
  a.switched_to_unaligned = true;
  ss::history_task b;  // a remote task: no start delay
  b.task = 1;
  b.name = "sink#0";
  b.operator_state_bytes = 96;
  c.task_breakdown = {a, b};
  return c;
}

}  // namespace

TEST_CASE("a checkpoint line and a start line decode to what was encoded") {
  const ss::history_checkpoint c = sample_checkpoint(7, false);
  const std::string line = ss::encode_history_line(c);
  REQUIRE(line.back() == '\n');
  REQUIRE(line.find('\n') == line.size() - 1);  // one line
  const std::optional<ss::history_event> back = ss::decode_history_line(line);
  REQUIRE(back);
  const auto* d = std::get_if<ss::history_checkpoint>(&*back);
  REQUIRE(d != nullptr);
  CHECK(d->id == 7);
  CHECK(d->mode == ss::checkpoint_mode::aligned_timeout);
  CHECK(d->triggered_unix_ms == c.triggered_unix_ms);
  CHECK(d->duration == c.duration);
  CHECK(d->max_alignment_duration == c.max_alignment_duration);
  CHECK(d->operator_state_bytes == 4096);
  CHECK(d->channel_state_bytes == 512);
  CHECK(d->acknowledged == 1);
  CHECK_FALSE(d->completed);
  CHECK(d->reason == "expired");
  CHECK(d->detail == c.detail);
  REQUIRE(d->task_breakdown.size() == 2);
  CHECK(d->task_breakdown[0].name == "gen#0");
  CHECK(d->task_breakdown[0].start_delay == std::optional<std::chrono::nanoseconds>(150'000ns));
  CHECK(d->task_breakdown[0].write_duration == 800'000ns);
  CHECK(d->task_breakdown[0].fsync_duration == 300'000ns);
  CHECK(d->task_breakdown[0].switched_to_unaligned);
  CHECK_FALSE(d->task_breakdown[1].start_delay.has_value());  // absent stays absent, not 0
  CHECK(d->switched_to_unaligned());

  ss::history_start s;
  s.unix_ms = 1'764'657'000'000;
  s.job = "wordcount";
  s.resumed_from = 41;
  s.restore_duration = 3'000'000ns;
  const std::optional<ss::history_event> started = ss::decode_history_line(ss::encode_history_line(s));
  REQUIRE(started);
  const auto* t = std::get_if<ss::history_start>(&*started);
  REQUIRE(t != nullptr);
  CHECK(t->job == "wordcount");
  CHECK(t->resumed_from == std::optional<ss::checkpoint_id>(41));
  CHECK(t->restore_duration == 3'000'000ns);
  s.resumed_from.reset();
  const auto fresh = ss::decode_history_line(ss::encode_history_line(s));
  REQUIRE(fresh);
  CHECK_FALSE(std::get<ss::history_start>(*fresh).resumed_from.has_value());
}

TEST_CASE("a torn last line and garbage lines are skipped and counted, the rest is read") {
  const std::string one = ss::encode_history_line(sample_checkpoint(1, true));
  const std::string two = ss::encode_history_line(sample_checkpoint(2, true));
  const std::string three = ss::encode_history_line(sample_checkpoint(3, false));
  // A crash mid-append: the last line is cut short (no newline).
  const std::string torn = one + "not json at all\n" + "\n" + two + "{\"v\":1,\"event\":\"martian\"}\n" +
                           three.substr(0, three.size() / 2);
  const ss::history_contents h = ss::parse_history(torn);
  REQUIRE(h.events.size() == 2);
  CHECK(std::get<ss::history_checkpoint>(h.events[0]).id == 1);
  CHECK(std::get<ss::history_checkpoint>(h.events[1]).id == 2);
  CHECK(h.skipped_lines == 3);  // the garbage, the unknown event, the torn line (the empty one is no line)

  // A complete last line without its newline is still torn: the append did not finish.
  CHECK(ss::parse_history(one + three.substr(0, three.size() - 1)).events.size() == 1);
  // Odd bytes, another version, an empty file.
  CHECK(ss::parse_history(std::string("\xff\xfe\x00\n", 4)).skipped_lines == 1);
  CHECK(ss::parse_history("{\"v\":2,\"event\":\"start\"}\n").events.empty());
  CHECK(ss::parse_history("").events.empty());
}

TEST_CASE("the reader reads the directory's history file, and names it when it is missing") {
  sluice::test::temp_dir dir;
  const auto missing = ss::read_history_blocking(dir.path());
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == std::errc::no_such_file_or_directory);
  CHECK_THAT(missing.error().message(), Catch::Contains("history.jsonl"));
  {
    std::ofstream out(dir.file("history.jsonl"), std::ios::binary);
    out << ss::encode_history_line(sample_checkpoint(5, true)) << "{torn";
  }
  const auto read = ss::read_history_blocking(dir.path());
  REQUIRE(read);
  CHECK(read->events.size() == 1);
  CHECK(read->skipped_lines == 1);
}

TEST_CASE("the summary counts completed, aborted by reason, switches and restores") {
  std::vector<ss::history_event> events;
  ss::history_start fresh;
  events.emplace_back(fresh);
  events.emplace_back(sample_checkpoint(1, true));
  events.emplace_back(sample_checkpoint(2, false));
  ss::history_checkpoint plain = sample_checkpoint(3, true);
  for (ss::history_task& t : plain.task_breakdown) t.switched_to_unaligned = false;
  events.emplace_back(plain);
  ss::history_start resumed;
  resumed.resumed_from = 3;
  events.emplace_back(resumed);
  const ss::history_summary s = ss::summarize(events);
  CHECK(s.completed == 2);
  CHECK(s.aborted == 1);
  CHECK(s.aborted_by_reason == std::map<std::string, std::size_t>{{"expired", 1}});
  CHECK(s.switched_to_unaligned == 2);
  CHECK(s.starts == 2);
  CHECK(s.restores == 1);
  REQUIRE(s.last_completed != nullptr);
  CHECK(s.last_completed->id == 3);
}

TEST_CASE("history_of names the tasks and keeps an unknown start delay unknown") {
  ss::checkpoint_stats stats;
  stats.id = 9;
  stats.mode = ss::checkpoint_mode::aligned;
  stats.tasks = 2;
  stats.acknowledged = 2;
  stats.outcome.state = ss::checkpoint_outcome::status::completed;
  ss::task_checkpoint_breakdown local;
  local.task = 0;
  local.start_delay = 5us;
  local.fsync_duration = 7us;
  ss::task_checkpoint_breakdown remote;
  remote.task = 1;
  stats.task_breakdown = {local, remote};
  const ss::history_checkpoint c = ss::history_of(stats, {"read#0", "count#0"});
  CHECK(c.completed);
  CHECK(c.reason.empty());
  REQUIRE(c.task_breakdown.size() == 2);
  CHECK(c.task_breakdown[0].name == "read#0");
  CHECK(c.task_breakdown[0].start_delay == std::optional<std::chrono::nanoseconds>(5us));
  CHECK(c.task_breakdown[0].fsync_duration == 7us);
  CHECK(c.task_breakdown[1].name == "count#0");
  CHECK_FALSE(c.task_breakdown[1].start_delay.has_value());
}
