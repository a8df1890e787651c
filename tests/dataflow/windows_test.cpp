// The event-time window operators (windows.hpp) driven directly: tumbling and sliding window
// boundaries, the first windows near time 0, allowed lateness and its late firings, late records,
// restore from snapshot bytes mid-stream, and refused parameters; each window kind's identity; and a
// sliding-window job end to end from a timed generated source at parallelism 2, against a count
// computed here. The per-window top-N is in top_n_test.cpp.
#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/dataflow/windows.hpp>

#include <support/temp_dir.hpp>

#include "capture_support.hpp"
#include "wordcount_support.hpp"

#include "state_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
using sluice::test::full_snapshot;
using sluice::snapshot::checkpoint_mode;
using sluice::test::capture;
using sluice::test::published_lines;
using sluice::test::temp_dir;

namespace {

using event = std::pair<std::string, std::uint64_t>;  // (key, time)
using lines_t = std::vector<std::string>;
using tumbling = tumbling_window_aggregate<std::string, event, std::uint64_t, std::string>;
using sliding = sliding_window_aggregate<std::string, event, std::uint64_t, std::string>;

// Counts per key and window: "start key count".
sliding::functions count_events() {
  return {[](const event& e) { return e.second; }, [](const event& e) { return e.first; },
          [](std::uint64_t& n, const event&) { ++n; },
          [](std::uint64_t start, const std::string& k, const std::uint64_t& n) {
            return std::to_string(start) + " " + k + " " + std::to_string(n);
          }};
}

// One step of an operator's input: a record, or a watermark when the key is empty.
using step = std::pair<std::string, std::uint64_t>;
template <class Op>
void feed(Op& op, const std::vector<step>& steps, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; ++i) {
    if (steps[i].first.empty()) {
      op.watermark(steps[i].second);
    } else {
      op.collect(steps[i]);
    }
  }
}

}  // namespace

TEST_CASE("a tumbling window holds the record at its last instant and fires when the watermark reaches it",
          "[dataflow][windows]") {
  capture out;
  tumbling win(10, count_events(), out);
  win.collect({"a", 9});   // the last instant of [0, 10)
  win.collect({"a", 10});  // the first of [10, 20)
  win.collect({"b", 0});
  win.watermark(8);
  CHECK(out.take().empty());
  win.watermark(9);
  CHECK(out.take() == lines_t{"0 a 1", "0 b 1"});  // keys in key order
  win.collect({"a", 5});                           // its window fired: late (lateness 0)
  CHECK(win.late_records() == 1);
  CHECK(win.open_windows() == 1);
  win.end_of_data();
  CHECK(out.take() == lines_t{"10 a 1"});
  CHECK(out.watermarks == std::vector<std::uint64_t>{8, 9});
  CHECK(out.ended == 1);
  CHECK(win.open_windows() == 0);
}

TEST_CASE("a sliding window fires at its last instant, windows oldest first, none starting below 0",
          "[dataflow][windows]") {
  capture out;
  sliding win(10, 5, count_events(), out);
  win.collect({"a", 0});   // [0, 10) only: [-5, 5) does not exist
  win.collect({"a", 3});   // [0, 10) only
  win.collect({"a", 14});  // [5, 15) and [10, 20)
  win.collect({"a", 15});  // [10, 20) and [15, 25)
  CHECK(win.open_windows() == 4);
  win.watermark(8);
  CHECK(out.take().empty());
  win.watermark(13);
  CHECK(out.take() == lines_t{"0 a 2"});
  win.watermark(14);
  CHECK(out.take() == lines_t{"5 a 1"});
  win.watermark(30);  // two windows at once, oldest first
  CHECK(out.take() == lines_t{"10 a 2", "15 a 1"});
  CHECK(win.open_windows() == 0);
  win.end_of_data();
  CHECK(out.take().empty());
}

TEST_CASE("a sliding window counts a record in size / slide windows, fewer only near time 0", "[dataflow][windows]") {
  capture out;
  sliding win(12, 3, count_events(), out);
  for (std::uint64_t t = 0; t < 60; ++t) win.collect({"k", t});
  win.end_of_data();
  std::map<std::uint64_t, std::uint64_t> counts;
  std::uint64_t total = 0;
  for (const std::string& line : out.lines) {
    const std::uint64_t start = std::stoull(line.substr(0, line.find(' ')));
    const std::uint64_t n = std::stoull(line.substr(line.rfind(' ') + 1));
    CHECK(start % 3 == 0);
    CHECK(counts.count(start) == 0);
    counts[start] = n;
    total += n;
  }
  // Windows start at 0, 3, ..., 57; those inside [0, 60) hold 12 records each.
  CHECK(counts.size() == 20);
  CHECK(counts.begin()->first == 0);
  CHECK(counts.at(0) == 12);
  CHECK(counts.at(48) == 12);
  CHECK(counts.at(51) == 9);
  CHECK(counts.at(57) == 3);
  // Every record at t >= 9 is in 4 windows; t in [0, 3) in 1, [3, 6) in 2, [6, 9) in 3.
  CHECK(total == 51 * 4 + 3 * (1 + 2 + 3));

  capture odd;  // a slide that does not divide the size: 2 or 3 windows of 10 every 4
  sliding uneven(10, 4, count_events(), odd);
  uneven.collect({"k", 13});  // [4, 14), [8, 18), [12, 22)
  uneven.collect({"k", 11});  // [4, 14), [8, 18)
  uneven.end_of_data();
  CHECK(odd.lines == lines_t{"4 k 2", "8 k 2", "12 k 1"});
}

TEST_CASE("window parameters outside 1 <= slide <= size are refused, naming the values", "[dataflow][windows]") {
  capture out;
  CHECK_THROWS_WITH(sliding(10, 0, count_events(), out), Catch::Contains("slide 0") && Catch::Contains("size 10"));
  CHECK_THROWS_WITH(sliding(10, 11, count_events(), out), Catch::Contains("slide 11") && Catch::Contains("size 10"));
  CHECK_THROWS_WITH(sliding(0, 0, count_events(), out), Catch::Contains("size must be at least 1"));
  CHECK_THROWS_AS(tumbling(0, count_events(), out), std::invalid_argument);
  CHECK_NOTHROW(sliding(10, 10, count_events(), out));
  job_builder job("refused");
  auto keyed = job.generate<event>("gen", 1, 10, [](std::uint64_t n) { return event("k", n); })
                   .key_by<std::string>([](const event& e) { return e.first; });
  const auto time = [](const event& e) { return e.second; };
  const auto fold = [](std::uint64_t& n, const event&) { ++n; };
  const auto emit = [](std::uint64_t, const std::string&, const std::uint64_t&) { return std::string(); };
  CHECK_THROWS_WITH((keyed.sliding_window<std::uint64_t, std::string>("w", 1, 5, 6, time, fold, emit)),
                    Catch::Contains("slide 6"));
  CHECK_THROWS_AS((keyed.window<std::uint64_t, std::string>("w", 1, 0, time, fold, emit)), std::invalid_argument);
}

TEST_CASE("with allowed lateness a fired window keeps its state and fires again at once for a late record",
          "[dataflow][windows]") {
  capture out;
  tumbling win(10, count_events(), out, window_options{.allowed_lateness = 5});
  win.collect({"a", 3});
  win.collect({"b", 4});
  win.watermark(9);
  CHECK(out.take() == lines_t{"0 a 1", "0 b 1"});
  CHECK(win.open_windows() == 1);  // fired, kept until the watermark reaches 9 + 5
  win.collect({"a", 4});           // late, within the lateness: the updated count, for its key only
  CHECK(out.take() == lines_t{"0 a 2"});
  win.watermark(13);
  CHECK(out.take().empty());  // a watermark does not fire it again
  win.collect({"c", 1});      // a key the window had not seen
  CHECK(out.take() == lines_t{"0 c 1"});
  win.collect({"a", 12});  // on time for [10, 20)
  win.watermark(14);
  CHECK(win.open_windows() == 1);  // [0, 10) dropped
  win.collect({"a", 5});           // beyond the lateness: dropped and counted
  CHECK(win.late_records() == 1);
  CHECK(out.take().empty());
  win.watermark(25);  // [10, 20) fires at 19, kept until 24
  CHECK(out.take() == lines_t{"10 a 1"});
  win.collect({"a", 29});  // [20, 30): not yet due, so no firing
  win.collect({"a", 21});
  CHECK(out.take().empty());
  win.end_of_data();  // fires what is open and drops everything
  CHECK(out.take() == lines_t{"20 a 2"});
  CHECK(win.open_windows() == 0);
  CHECK(win.late_records() == 1);
}

TEST_CASE("a late record within the lateness fires a window that had no state when its time passed",
          "[dataflow][windows]") {
  capture out;
  sliding win(10, 5, count_events(), out, window_options{.allowed_lateness = 5});
  win.collect({"a", 12});  // [5, 15) and [10, 20)
  win.watermark(14);
  CHECK(out.take() == lines_t{"5 a 1"});
  // t = 8 is in [0, 10), past its lateness at 9 + 5 = 14, and in [5, 15), kept until 19: one
  // late firing, and the record is not counted late.
  win.collect({"a", 8});
  CHECK(out.take() == lines_t{"5 a 2"});
  CHECK(win.late_records() == 0);
  win.collect({"a", 2});  // [0, 10) only: late
  CHECK(win.late_records() == 1);
  win.watermark(21);
  CHECK(out.take() == lines_t{"10 a 1"});
  win.collect({"b", 13});  // [5, 15) is gone (14 + 5 <= 21); [10, 20) fired and is kept until 24
  CHECK(out.take() == lines_t{"10 b 1"});
  win.watermark(24);
  CHECK(win.open_windows() == 0);
}

TEST_CASE("a window operator restored from snapshot bytes mid-stream emits what an uninterrupted one does",
          "[dataflow][windows]") {
  const window_options late{.allowed_lateness = 6};
  const std::vector<step> steps = {
      {"b", 1}, {"a", 2}, {"a", 7}, {"c", 11}, {"", 9}, {"a", 4}, {"b", 12}, {"", 14}, {"a", 3},
      {"c", 13}, {"b", 17}, {"", 16}, {"a", 9}, {"a", 21}, {"", 20}, {"b", 12}, {"c", 26}, {"", 31}, {"a", 33}};
  capture whole;
  sliding a(10, 5, count_events(), whole, late);
  feed(a, steps, 0, steps.size());
  a.end_of_data();
  REQUIRE(whole.lines.size() > 10);
  for (std::size_t cut = 1; cut < steps.size(); cut += 3) {
    INFO("snapshot after " << cut << " steps");
    capture before, after;
    sliding b(10, 5, count_events(), before, late);
    feed(b, steps, 0, cut);
    const std::vector<std::byte> bytes = full_snapshot(b);
    sliding c(10, 5, count_events(), after, late);
    c.restore_state(bytes);
    CHECK(c.late_records() == b.late_records());
    feed(c, steps, cut, steps.size());
    c.end_of_data();
    lines_t resumed = before.lines;
    resumed.insert(resumed.end(), after.lines.begin(), after.lines.end());
    CHECK(resumed == whole.lines);
    CHECK(c.late_records() == a.late_records());
  }
  // The same records in another order (watermarks in place) restore to the same state.
  capture x_out, y_out;
  sliding x(10, 5, count_events(), x_out, late);
  sliding y(10, 5, count_events(), y_out, late);
  for (const event& e : {event{"b", 1}, event{"a", 2}, event{"c", 8}, event{"a", 7}}) x.collect(e);
  for (const event& e : {event{"a", 7}, event{"c", 8}, event{"a", 2}, event{"b", 1}}) y.collect(e);
  capture xr_out, yr_out;
  sliding xr(10, 5, count_events(), xr_out, late);
  sliding yr(10, 5, count_events(), yr_out, late);
  xr.restore_state(full_snapshot(x));
  yr.restore_state(full_snapshot(y));
  xr.end_of_data();
  yr.end_of_data();
  CHECK(xr_out.lines == yr_out.lines);
  CHECK(xr_out.lines.size() == 5);
  CHECK_THROWS_WITH(x.restore_state(std::vector<std::byte>{std::byte{9}}), Catch::Contains("sliding window"));
  CHECK_THROWS_AS(x.restore_state(std::vector<std::byte>{std::byte{2}, std::byte{1}}), std::runtime_error);
  CHECK_THROWS_AS(x.restore_state(std::vector<std::byte>{}), std::runtime_error);
}

TEST_CASE("a tumbling window restores the state layout it had before lateness (version 1)", "[dataflow][windows]") {
  // fired_through 20 (as + 1), 2 late records, window [20, 30) open with a -> 3.
  using old_windows = std::vector<std::pair<std::uint64_t, std::vector<std::pair<std::string, std::uint64_t>>>>;
  const std::vector<std::byte> old = detail::encode_state(
      std::make_tuple(std::uint64_t{21}, std::uint64_t{2}, old_windows{{20, {{"a", 3}}}}));
  capture out;
  tumbling win(10, count_events(), out);
  win.restore_state(old);
  CHECK(win.late_records() == 2);
  win.collect({"a", 15});  // [10, 20) had fired
  CHECK(win.late_records() == 3);
  win.collect({"a", 25});
  win.watermark(29);
  CHECK(out.lines == lines_t{"20 a 4"});
  CHECK_THROWS_WITH(win.restore_state(std::vector<std::byte>{std::byte{1}, std::byte{0}}),
                    Catch::Contains("tumbling window"));
}

TEST_CASE("window stages name their kind, size, slide and lateness in the job identity", "[dataflow][windows]") {
  job_builder job("ids");
  auto keyed = job.generate<event>("gen", 1, 10, [](std::uint64_t n) { return event("k", n); })
                   .key_by<std::string>([](const event& e) { return e.first; });
  const auto time = [](const event& e) { return e.second; };
  const auto fold = [](std::uint64_t& n, const event&) { ++n; };
  const auto emit = [](std::uint64_t, const std::string&, const std::uint64_t&) { return std::string(); };
  keyed.window<std::uint64_t, std::string>("plain", 1, 100, time, fold, emit).discard();
  keyed.window<std::uint64_t, std::string>("late", 1, 100, time, fold, emit, {.allowed_lateness = 7}).discard();
  keyed.sliding_window<std::uint64_t, std::string>("slide", 1, 20, 5, time, fold, emit).discard();
  keyed.sliding_window<std::uint64_t, std::string>("slide-late", 1, 20, 5, time, fold, emit, {.allowed_lateness = 3})
      .discard();
  const auto& stages = job.stages();
  REQUIRE(stages.size() == 5);
  using ids = std::vector<std::string>;
  CHECK(stages[1].identity ==
        ids{"key_groups=128", "op=window", "window.kind=tumbling", "window.size=100", "sink=discard"});
  CHECK(stages[2].identity == ids{"key_groups=128", "op=window", "window.kind=tumbling", "window.size=100",
                                  "window.lateness=7", "sink=discard"});
  CHECK(stages[3].identity == ids{"key_groups=128", "op=window", "window.kind=sliding", "window.size=20",
                                  "window.slide=5", "window.lateness=0", "sink=discard"});
  CHECK(stages[4].identity == ids{"key_groups=128", "op=window", "window.kind=sliding", "window.size=20",
                                  "window.slide=5", "window.lateness=3", "sink=discard"});
}

TEST_CASE("a sliding-window job from a timed generated source at parallelism 2 counts every window",
          "[dataflow][windows]") {
  // Record n: key n % 3 at time n / 2; windows of 20 every 5.
  const std::uint64_t count = 4000;
  const temp_dir dir;
  job_builder job("sliding");
  using rec = std::pair<std::uint64_t, std::uint64_t>;  // (key, time)
  using out_t = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;
  job.generate_timed<rec>(
         "gen", 2, count, [](std::uint64_t n) { return rec(n % 3, n / 2); }, [](std::uint64_t n) { return n / 2; })
      .key_by<std::uint64_t>([](const rec& r) { return r.first; })
      .sliding_window<std::uint64_t, out_t>(
          "count", 2, 20, 5, [](const rec& r) { return r.second; }, [](std::uint64_t& n, const rec&) { ++n; },
          [](std::uint64_t start, const std::uint64_t& k, const std::uint64_t& n) { return out_t(start, k, n); })
      .write_lines(dir.file("out"), [](const out_t& o) {
        return std::to_string(std::get<0>(o)) + " " + std::to_string(std::get<1>(o)) + " " +
               std::to_string(std::get<2>(o));
      });
  const job_result r =
      run_job(job, sluice::test::test_job_settings(dir.file("checkpoints"), checkpoint_mode::unaligned, "local"));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> expected_counts;
  for (std::uint64_t n = 0; n < count; ++n) {
    const std::uint64_t t = n / 2;
    for (std::uint64_t s = 0; s <= t; s += 5) {
      if (t < s + 20) ++expected_counts[{s, n % 3}];
    }
  }
  std::vector<std::string> expected;
  for (const auto& [w, n] : expected_counts) {
    expected.push_back(std::to_string(w.first) + " " + std::to_string(w.second) + " " + std::to_string(n));
  }
  std::sort(expected.begin(), expected.end());
  CHECK(expected.size() == 400 * 3);
  CHECK(published_lines(dir.file("out")) == expected);
}
