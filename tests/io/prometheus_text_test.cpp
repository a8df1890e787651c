// io::prometheus_text: the exposition format 0.0.4, line by line.

#include <sluice/io/prometheus_text.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

using namespace sluice::io;

TEST_CASE("a counter family has its HELP and TYPE lines, then its samples with labels") {
  prometheus_text out;
  out.family("sluice_records_total", metric_type::counter, "Records taken.");
  out.sample("sluice_records_total", {{"job", "wordcount"}, {"task", "count#1"}}, std::uint64_t{42});
  out.sample("sluice_records_total", {}, std::uint64_t{0});
  CHECK(out.text() ==
        "# HELP sluice_records_total Records taken.\n"
        "# TYPE sluice_records_total counter\n"
        "sluice_records_total{job=\"wordcount\",task=\"count#1\"} 42\n"
        "sluice_records_total 0\n");
}

TEST_CASE("label values escape backslash, double quote and newline, and HELP escapes backslash and newline") {
  CHECK(prometheus_text::escape_label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  CHECK(prometheus_text::escape_label_value("plain {},= text") == "plain {},= text");
  CHECK(prometheus_text::escape_help("line 1\nline \"2\" \\") == "line 1\\nline \"2\" \\\\");
  prometheus_text out;
  out.family("g", metric_type::gauge, "two\nlines");
  out.sample("g", {{"path", "C:\\dir\n\"x\""}}, 1.5);
  CHECK(out.text() == "# HELP g two\\nlines\n# TYPE g gauge\ng{path=\"C:\\\\dir\\n\\\"x\\\"\"} 1.5\n");
}

TEST_CASE("values: integers without a fraction, doubles round-trip, and +Inf, -Inf, NaN") {
  CHECK(prometheus_text::format_value(3.0) == "3");
  CHECK(prometheus_text::format_value(-2.0) == "-2");
  CHECK(prometheus_text::format_value(0.25) == "0.25");
  CHECK(std::stod(prometheus_text::format_value(0.1)) == 0.1);
  CHECK(std::stod(prometheus_text::format_value(1e300)) == 1e300);
  CHECK(prometheus_text::format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(prometheus_text::format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(prometheus_text::format_value(std::nan("")) == "NaN");
  prometheus_text out;
  out.family("big", metric_type::counter, "u64");
  out.sample("big", {}, std::uint64_t{18446744073709551615u});
  CHECK(out.text().find("big 18446744073709551615\n") != std::string::npos);
}

TEST_CASE("a histogram's buckets are cumulative, end with +Inf, and come with _sum and _count") {
  histogram_data h({0.25, 1, 10});
  for (double v : {0.125, 0.25, 0.5, 4.0, 50.0, 100.0}) h.observe(v);
  CHECK(h.counts() == std::vector<std::uint64_t>{2, 1, 1, 2});  // 0.25 falls in le="0.25"
  prometheus_text out;
  out.family("d_seconds", metric_type::histogram, "Durations.");
  out.histogram("d_seconds", {{"job", "j"}}, h);
  CHECK(out.text() ==
        "# HELP d_seconds Durations.\n"
        "# TYPE d_seconds histogram\n"
        "d_seconds_bucket{job=\"j\",le=\"0.25\"} 2\n"
        "d_seconds_bucket{job=\"j\",le=\"1\"} 3\n"
        "d_seconds_bucket{job=\"j\",le=\"10\"} 4\n"
        "d_seconds_bucket{job=\"j\",le=\"+Inf\"} 6\n"
        "d_seconds_sum{job=\"j\"} 154.875\n"
        "d_seconds_count{job=\"j\"} 6\n");
  prometheus_text empty;
  empty.family("e", metric_type::histogram, "None yet.");
  empty.histogram("e", {}, histogram_data({1}));
  CHECK(empty.text() == "# HELP e None yet.\n# TYPE e histogram\ne_bucket{le=\"1\"} 0\ne_bucket{le=\"+Inf\"} 0\ne_sum 0\n"
                        "e_count 0\n");
}

TEST_CASE("misuse throws: bad names, a family twice, a sample outside its family, bad bucket bounds") {
  prometheus_text out;
  CHECK_THROWS_AS(out.family("9lives", metric_type::gauge, ""), std::logic_error);
  CHECK_THROWS_AS(out.family("has-dash", metric_type::gauge, ""), std::logic_error);
  out.family("a", metric_type::gauge, "");
  CHECK_THROWS_AS(out.family("a", metric_type::gauge, ""), std::logic_error);
  CHECK_THROWS_AS(out.sample("b", {}, 1.0), std::logic_error);
  CHECK_THROWS_AS(out.sample("a", {{"bad:label", "x"}}, 1.0), std::logic_error);
  CHECK_THROWS_AS(out.sample("a", {{"__reserved", "x"}}, 1.0), std::logic_error);
  CHECK_THROWS_AS(out.histogram("a", {}, histogram_data({1})), std::logic_error);
  out.family("h", metric_type::histogram, "");
  CHECK_THROWS_AS(out.histogram("h", {{"le", "1"}}, histogram_data({1})), std::logic_error);
  CHECK_THROWS_AS(histogram_data({1, 1}), std::invalid_argument);
  CHECK_THROWS_AS(histogram_data({2, 1}), std::invalid_argument);
  CHECK_THROWS_AS(histogram_data({std::numeric_limits<double>::infinity()}), std::invalid_argument);
}
