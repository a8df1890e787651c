// The two-input window join: the operator on its own (firing, state across a restore, late
// records), the CSV rows, and the join job end to end against a nested-loop join computed here, in
// every checkpoint mode, over both transports, and under backpressure from a slow sink.
#include <sluice/dataflow/join.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <support/temp_dir.hpp>

#include "join_support.hpp"
#include "capture_support.hpp"
#include "wordcount_support.hpp"

#include "state_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::test::full_snapshot;
using sluice::snapshot::checkpoint_mode;
using sluice::test::nested_loop_join;
using sluice::test::capture;
using sluice::test::published_lines;
using sluice::test::temp_dir;
using sluice::test::write_join_file;

namespace {

using event = std::pair<std::string, std::uint64_t>;  // (key, time)
using join_t = tumbling_window_join<std::string, event, event, std::string>;

join_t::functions join_functions() {
  const auto time = [](const event& e) { return e.second; };
  const auto key = [](const event& e) { return e.first; };
  return {time, time, key, key, [](std::uint64_t start, const std::string& k, const event& l, const event& r) {
            return std::to_string(start) + " " + k + " " + std::to_string(l.second) + " " + std::to_string(r.second);
          }};
}

job_result run_join(const temp_dir& dir, checkpoint_mode mode, const std::string& transport, std::uint64_t window,
                    std::chrono::microseconds slow_sink = {}, std::size_t retained = 3) {
  job_builder job("join");
  build_join(job, {dir.file("left.csv"), dir.file("right.csv"), dir.file("out"), 2, window, slow_sink});
  job_settings settings = sluice::test::test_job_settings(dir.file("checkpoints"), mode, transport);
  settings.retained_checkpoints = retained;
  return run_job(job, settings);
}

}  // namespace

TEST_CASE("a window fires once the watermark passes its end, with every pair of its key", "[dataflow][join]") {
  capture out;
  join_t join(10, join_functions(), out);
  join.left({"a", 1});
  join.right({"a", 9});
  join.right({"b", 3});  // no left partner
  join.left({"a", 12});  // the next window
  join.right({"a", 5});
  join.watermark(8);
  CHECK(out.lines.empty());  // [0, 10) ends at 9
  join.watermark(9);
  CHECK(out.lines == std::vector<std::string>{"0 a 1 9", "0 a 1 5"});
  CHECK(out.watermarks == std::vector<std::uint64_t>{8, 9});
  join.right({"a", 19});
  join.end_of_data();  // the rest fires
  CHECK(out.lines.back() == "10 a 12 19");
  CHECK(out.ended == 1);
  CHECK(join.open_windows() == 0);
}

TEST_CASE("a record for a window that has fired is late: dropped and counted", "[dataflow][join]") {
  capture out;
  join_t join(10, join_functions(), out);
  join.left({"a", 3});
  join.watermark(15);
  join.right({"a", 4});
  CHECK(join.late_records() == 1);
  join.end_of_data();
  CHECK(out.lines.empty());
}

TEST_CASE("a join restored from its snapshot emits exactly what an uninterrupted one does", "[dataflow][join]") {
  capture whole;
  join_t a(10, join_functions(), whole);
  capture before, after;
  join_t b(10, join_functions(), before);
  const std::vector<std::pair<bool, event>> input = {
      {true, {"a", 1}}, {false, {"a", 2}}, {true, {"b", 11}}, {false, {"a", 3}}, {false, {"b", 14}},
      {true, {"a", 15}}, {false, {"a", 16}}, {true, {"b", 21}}, {false, {"b", 25}}};
  const auto feed = [](join_t& j, const std::pair<bool, event>& in) {
    if (in.first) {
      j.left(in.second);
    } else {
      j.right(in.second);
    }
  };
  for (const auto& in : input) feed(a, in);
  a.watermark(9);
  a.end_of_data();
  // The same input, with a snapshot after five records and a new operator restored from it.
  for (std::size_t i = 0; i < 5; ++i) feed(b, input[i]);
  b.watermark(9);
  const std::vector<std::byte> state = full_snapshot(b);
  join_t c(10, join_functions(), after);
  c.restore_state(state);
  for (std::size_t i = 5; i < input.size(); ++i) feed(c, input[i]);
  c.end_of_data();
  std::vector<std::string> resumed = before.lines;
  resumed.insert(resumed.end(), after.lines.begin(), after.lines.end());
  CHECK(resumed == whole.lines);
  CHECK_THROWS_WITH(c.restore_state(std::vector<std::byte>{std::byte{9}}), Catch::Contains("window join"));
}

TEST_CASE("join rows parse as key,timestamp_ms,payload, a bad row says what is wrong", "[dataflow][join]") {
  const join_row r = parse_join_row("user-7,1234,clicked,twice");
  CHECK(r.key == "user-7");
  CHECK(r.timestamp_ms == 1234);
  CHECK(r.payload == "clicked,twice");
  CHECK(parse_join_row(",0,").key.empty());
  CHECK_THROWS_WITH(parse_join_row("no commas"), Catch::Contains("key,timestamp_ms,payload"));
  CHECK_THROWS_WITH(parse_join_row("k,12x,p"), Catch::Contains("12x"));
  CHECK_THROWS_WITH(parse_join_row("k,,p"), Catch::Contains("whole number"));
  CHECK_THROWS_WITH(parse_join_row("k,-3,p"), Catch::Contains("-3"));
}

TEST_CASE("the join job equals a nested-loop join, in every checkpoint mode and over both transports",
          "[dataflow][join]") {
  const auto mode = GENERATE(checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout);
  const std::string transport = GENERATE("local", "tcp");
  INFO("mode " << sluice::snapshot::to_string(mode) << ", transport " << transport);
  temp_dir dir;
  write_join_file(dir.file("left.csv"), 3000, 40, 20'000, 1, "L");
  write_join_file(dir.file("right.csv"), 2500, 40, 20'000, 2, "R");
  const job_result r = run_join(dir, mode, transport, 1000);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  const std::vector<std::string> expected = nested_loop_join(dir.file("left.csv"), dir.file("right.csv"), 1000);
  CHECK(expected.size() > 1000);
  CHECK(published_lines(dir.file("out")) == expected);
}

TEST_CASE("a join input out of time order in a reading task's range fails the job naming the file and the byte", "[dataflow][join]") {
  temp_dir dir;
  {
    std::ofstream l(dir.file("left.csv"));
    l << "a,5,x\na,4,y\na,6,z\na,7,w\n";  // the first reading task (bytes 0-11) sees 5, then 4
    std::ofstream r(dir.file("right.csv"));
    r << "a,5,q\n";
  }
  const job_result r = run_join(dir, checkpoint_mode::aligned, "local", 10);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.message, Catch::Contains("left.csv at byte 6") && Catch::Contains("time 4 is before the previous line's 5") &&
                            Catch::Contains("left#0"));
}

TEST_CASE("a malformed join row fails the job with the row in the message", "[dataflow][join]") {
  temp_dir dir;
  {
    std::ofstream l(dir.file("left.csv"));
    l << "a,5,x\nthis is not csv\n";
    std::ofstream r(dir.file("right.csv"));
    r << "a,5,q\n";
  }
  const job_result r = run_join(dir, checkpoint_mode::aligned, "local", 10);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.message, Catch::Contains("this is not csv") && Catch::Contains("left.csv at byte 6"));
}

TEST_CASE("under backpressure from a slow sink, unaligned checkpoints complete with in-flight data and the output is exact",
          "[dataflow][join]") {
  temp_dir dir;
  // Few keys and small windows: many output lines, each costing the sink 100 us.
  write_join_file(dir.file("left.csv"), 1500, 5, 3000, 3, "L");
  write_join_file(dir.file("right.csv"), 1500, 5, 3000, 4, "R");
  const job_result r = run_join(dir, checkpoint_mode::unaligned, "local", 100, std::chrono::microseconds(100), 1000);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == nested_loop_join(dir.file("left.csv"), dir.file("right.csv"), 100));
  // Checkpoints completed while the sink held everything back, and some held channel state.
  CHECK(r.final.checkpoints_completed >= 3);
  long long most = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("checkpoints"))) {
    most = std::max(most, sluice::test::manifest_channel_bytes(e.path()));
  }
  CHECK(most > 0);
}

TEST_CASE("an aligned-timeout join under backpressure publishes exactly the nested-loop join", "[dataflow][join]") {
  temp_dir dir;
  write_join_file(dir.file("left.csv"), 1500, 5, 3000, 3, "L");
  write_join_file(dir.file("right.csv"), 1500, 5, 3000, 4, "R");
  const job_result r = run_join(dir, checkpoint_mode::aligned_timeout, "local", 100, std::chrono::microseconds(100));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == nested_loop_join(dir.file("left.csv"), dir.file("right.csv"), 100));
}
