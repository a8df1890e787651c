// `sluice bench <name> --plot FILE.png`: the chart's gnuplot data and script (bench/plot.hpp), and the
// built tool drawing a real PNG with gnuplot; the target is checked before a benchmark runs.

#include "run_sluice.hpp"

#include <plot.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

using sluice::bench::chart;
using sluice::bench::chart_style;
using sluice::test::run_sluice;
using sluice::test::temp_dir;
using sluice::test::tool_run;

namespace {

bool gnuplot_installed() {
  return ::access("/usr/bin/gnuplot", X_OK) == 0 || ::access("/usr/local/bin/gnuplot", X_OK) == 0;
}

#define SKIP_WITHOUT_GNUPLOT()                                                                 \
  do {                                                                                         \
    if (!gnuplot_installed()) {                                                                \
      std::printf("sluice-test-skipped: gnuplot is not installed (apt-get install gnuplot-nox)\n"); \
      return;                                                                                  \
    }                                                                                          \
  } while (0)

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a bars chart's data holds each series' medians and every sample at its group's place", "[plot]") {
  chart c;
  c.describe("t", "y", chart_style::bars);
  c.add("on", "sluice", {1, 3, 2});
  c.add("on", "baseline", {10, 30, 20});
  c.add("off", "sluice", {4});
  const std::string data = c.data();
  // Two median blocks (one per series), then one block per sample set.
  CHECK(count(data, "\n\n\n") + 1 >= 5);
  CHECK(data.find("# medians of sluice\n1 2\n4 4\n") != std::string::npos);  // group "off": x 3..6, its first series at 4
  CHECK(data.find("# medians of baseline\n2 20\n") != std::string::npos);
  CHECK(data.find("# on / baseline\n2 10\n2 30\n2 20\n") != std::string::npos);
  const std::string script = c.script("/d/chart.dat", "/d/out.png");
  CHECK(script.find("set output '/d/out.png'") != std::string::npos);
  CHECK(script.find("with boxes") != std::string::npos);
  CHECK(script.find("set yrange [0:*]") != std::string::npos);  // 1..30: linear
  CHECK(script.find("set xtics ('on' 1.5, 'off' 4.5)") != std::string::npos);
}

TEST_CASE("a distribution chart draws box plots and a log axis when its values span more than 50x", "[plot]") {
  chart c;
  c.describe("durations", "ms", chart_style::distribution);
  c.add("unaligned", "under backpressure", {2, 3, 4});
  c.add("aligned", "under backpressure", {900, 1000});
  c.add("empty", "under backpressure", {});  // no samples: left out, no empty group
  const std::string script = c.script("d", "o.png");
  CHECK(count(script, "with boxplot") == 2);
  CHECK(script.find("set logscale y") != std::string::npos);
  CHECK(script.find("'empty'") == std::string::npos);
  CHECK(count(script, "title 'under backpressure'") == 1);  // one key entry per series
}

TEST_CASE("a chart quotes names with quotes in them the way gnuplot reads them", "[plot]") {
  chart c;
  c.describe("it's \"quoted\"", "y", chart_style::bars);
  c.set_footnote("sluice bench x");
  c.add("a'b", "s", {1});
  const std::string script = c.script("d", "o.png");
  CHECK(script.find("set title \"it's \\\"quoted\\\"\\nsluice bench x\"") != std::string::npos);
  CHECK(script.find("'a''b'") != std::string::npos);
}

TEST_CASE("sluice bench wordcount --plot draws a PNG with gnuplot", "[plot]") {
  SKIP_WITHOUT_GNUPLOT();
  const temp_dir dir;
  const std::string png = dir.file("wc.png");
  tool_run r = run_sluice({"bench", "wordcount", "--lines", "2000", "--runs", "1", "--plot", png});
  INFO("stderr: " << r.err << "\nstdout: " << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("plot written to " + png) != std::string::npos);
  const std::string bytes = sluice::test::read_whole_file(png);
  REQUIRE(bytes.size() > 1000);
  CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_CASE("a plot into a missing directory or with a name that is not .png fails before the benchmark runs", "[plot]") {
  const temp_dir dir;
  tool_run missing = run_sluice({"bench", "wordcount", "--lines", "100000000", "--plot", dir.file("no/such/x.png")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("does not exist") != std::string::npos);
  CHECK(missing.out.empty());  // nothing measured: the check came first
  tool_run not_png = run_sluice({"bench", "wordcount", "--lines", "100000000", "--plot", dir.file("x.svg")});
  CHECK(not_png.exit_code == 2);
  CHECK(not_png.err.find("must name a .png file") != std::string::npos);
}

TEST_CASE("a benchmark that draws nothing does not take --plot", "[plot]") {
  const temp_dir dir;
  tool_run r = run_sluice({"bench", "nop", "--plot", dir.file("x.png")});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--plot") != std::string::npos);
}
