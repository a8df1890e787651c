// The job progress line of the sluice tool (apps/sluice/progress.hpp): its pure formatting, and
// what it writes to a terminal and to a file.

#include "progress.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <limits>
#include <string>

using sluice::apps::checkpoint_progress;
using sluice::apps::format_progress;
using sluice::apps::progress_fields;
using sluice::apps::progress_line;
using namespace std::chrono_literals;

namespace {

// Everything written to `file` so far.
std::string contents(std::FILE* file) {
  std::fflush(file);
  std::string out;
  std::rewind(file);
  char buf[512];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) out.append(buf, n);
  return out;
}

struct temp_file {
  std::FILE* file = std::tmpfile();
  temp_file() { REQUIRE(file != nullptr); }
  ~temp_file() { std::fclose(file); }
};

}  // namespace

TEST_CASE("the progress line shows the fields the job set, in a fixed order", "[report][progress]") {
  progress_fields f;
  f.elapsed_ms = 12'345;
  CHECK(format_progress(f) == "12.3 s");
  f.records_total = 1'234'567;
  f.records_per_second = 98'140.0;
  f.backpressure = 0.125;
  f.last_checkpoint = checkpoint_progress{7, 143, 10'896};
  CHECK(format_progress(f) == "12.3 s | 1,234,567 records read | 98.1k records/s | backpressure 12% | last chk-7: 143 ms, 10.6 KiB");
  f.records_total.reset();
  f.records_per_second.reset();
  CHECK(format_progress(f) == "12.3 s | backpressure 12% | last chk-7: 143 ms, 10.6 KiB");
}

TEST_CASE("progress numbers: elapsed time, grouped totals, scaled rates and clamped backpressure",
          "[report][progress]") {
  progress_fields f;
  f.elapsed_ms = 0;
  CHECK(format_progress(f) == "0.0 s");
  f.elapsed_ms = 59'999;
  CHECK(format_progress(f) == "59.9 s");
  f.elapsed_ms = 65'000;
  CHECK(format_progress(f) == "1m05s");
  f.elapsed_ms = 3'725'000;
  CHECK(format_progress(f) == "1h02m05s");

  f.elapsed_ms = 0;
  f.records_total = 999;
  f.records_per_second = 999.4;
  CHECK(format_progress(f) == "0.0 s | 999 records read | 999 records/s");
  f.records_total = 1000;
  f.records_per_second = 999.6;
  CHECK(format_progress(f) == "0.0 s | 1,000 records read | 1.0k records/s");
  f.records_per_second = 2.5e6;
  CHECK(format_progress(f) == "0.0 s | 1,000 records read | 2.5M records/s");
  f.records_per_second = std::numeric_limits<double>::quiet_NaN();
  CHECK(format_progress(f) == "0.0 s | 1,000 records read | 0 records/s");

  f = {};
  f.backpressure = 1.7;
  CHECK(format_progress(f) == "0.0 s | backpressure 100%");
  f.backpressure = -0.2;
  CHECK(format_progress(f) == "0.0 s | backpressure 0%");
}

TEST_CASE("on a terminal the line is redrawn in place at most every 250 ms, then replaced by the summary",
          "[report][progress]") {
  temp_file out;
  const auto t0 = progress_line::clock::now();
  {
    progress_line line({.out = out.file, .terminal = true, .width = 200, .start = t0});
    REQUIRE(line.draws());
    line.set_records(10, 5.0);
    line.update(t0 + 1000ms);
    line.set_records(20, 10.0);
    line.update(t0 + 1249ms);  // too soon: not drawn
    line.update(t0 + 1250ms);
    line.finish("done: 20 records");
    line.update(t0 + 2000ms);  // after finish: nothing
  }
  CHECK(contents(out.file) ==
        "\r1.0 s | 10 records read | 5 records/s\x1b[K"
        "\r1.2 s | 20 records read | 10 records/s\x1b[K"
        "\r\x1b[Kdone: 20 records\n");
}

TEST_CASE("the status line is cut to the terminal's width, and a line left showing is ended", "[report][progress]") {
  temp_file out;
  const auto t0 = progress_line::clock::now();
  {
    progress_line line({.out = out.file, .terminal = true, .width = 12, .start = t0});
    line.set_records(1'000'000, 1.0);
    line.update(t0);
  }
  CHECK(contents(out.file) == "\r0.0 s | 1,0\x1b[K\n");
}

TEST_CASE("a log line printed above the status line clears it first and draws it again after", "[report][progress]") {
  temp_file out;
  const auto t0 = progress_line::clock::now();
  {
    progress_line line({.out = out.file, .terminal = true, .width = 200, .start = t0});
    line.print_above("before any status");  // nothing drawn yet: just the line
    line.set_records(10, 5.0);
    line.update(t0 + 1000ms);
    line.print_above("2026-12-02T03:00:15.293Z warn  ex0 something happened");
    line.finish("done: 10 records");
    line.print_above("after the summary");
  }
  CHECK(contents(out.file) ==
        "before any status\n"
        "\r1.0 s | 10 records read | 5 records/s\x1b[K"
        "\r\x1b[K2026-12-02T03:00:15.293Z warn  ex0 something happened\n"
        "1.0 s | 10 records read | 5 records/s"
        "\r\x1b[Kdone: 10 records\n"
        "after the summary\n");
}

TEST_CASE("off a terminal, or quiet, only the summary is written", "[report][progress]") {
  const bool quiet = GENERATE(false, true);
  const bool terminal = quiet;  // quiet on a terminal; not quiet on a file
  temp_file out;
  const auto t0 = progress_line::clock::now();
  progress_line line({.quiet = quiet, .out = out.file, .terminal = terminal, .start = t0});
  CHECK_FALSE(line.draws());
  line.set_backpressure(0.5);
  line.update(t0);
  line.update(t0 + 1s);
  line.finish("done");
  CHECK(contents(out.file) == "done\n");
}

TEST_CASE("set() replaces every field shown, but the elapsed time comes from the line's clock",
          "[report][progress]") {
  temp_file out;
  const auto t0 = progress_line::clock::now();
  progress_line line({.out = out.file, .terminal = true, .width = 200, .start = t0});
  line.set_backpressure(0.5);
  progress_fields f;
  f.elapsed_ms = 99'000;  // not shown
  f.records_total = 42;
  f.records_per_second = 7.0;
  line.set(f);
  CHECK(line.fields(t0 + 2s).elapsed_ms == 2'000u);
  CHECK_FALSE(line.fields(t0).backpressure.has_value());
  line.update(t0 + 2s);
  line.finish("done");
  CHECK(contents(out.file) == "\r2.0 s | 42 records read | 7 records/s\x1b[K\r\x1b[Kdone\n");
}
