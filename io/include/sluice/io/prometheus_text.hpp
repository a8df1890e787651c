#pragma once
// prometheus_text: builds the Prometheus text exposition format 0.0.4 (what a /metrics endpoint
// serves with Content-Type "text/plain; version=0.0.4; charset=utf-8"). Pure formatting: no I/O, no
// clock, no registry; the caller samples its values and writes them here, family by family.
//
// Guarantees: each family is announced once with its # HELP and # TYPE lines, and its samples follow
// it contiguously (a sample of another family, or a family announced twice, throws
// std::logic_error); metric and label names are checked ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without
// ':'), label values and HELP text are escaped (\\, \", \n); values are integers as integers,
// doubles in their shortest round-trip form, and +Inf, -Inf, NaN; a histogram's buckets are
// cumulative, end with le="+Inf", and come with _sum and _count.
//
//   prometheus_text out;
//   out.family("sluice_task_records_in_total", metric_type::counter, "Records the task took in.");
//   out.sample("sluice_task_records_in_total", {{"job", "wordcount"}, {"task", "count#1"}}, 1234);
//   std::string body = std::move(out).str();

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::io {

enum class metric_type { counter, gauge, histogram, untyped };

struct metric_label {
  std::string_view name;
  std::string value;
};
using metric_labels = std::vector<metric_label>;

// Observations counted into fixed buckets (upper bounds, ascending, finite; +Inf is implicit).
class histogram_data {
 public:
  explicit histogram_data(std::vector<double> upper_bounds);
  void observe(double value) noexcept;
  const std::vector<double>& upper_bounds() const noexcept { return bounds_; }
  // Per bucket, not cumulative: counts()[i] observations in (bounds[i-1], bounds[i]], the last one
  // above every bound.
  const std::vector<std::uint64_t>& counts() const noexcept { return counts_; }
  double sum() const noexcept { return sum_; }
  std::uint64_t count() const noexcept { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class prometheus_text {
 public:
  // Announces a family: "# HELP name help" and "# TYPE name type".
  void family(std::string_view name, metric_type type, std::string_view help);
  // One sample of the current family (name: the family's; a histogram's through histogram()).
  void sample(std::string_view name, const metric_labels& labels, double value);
  void sample(std::string_view name, const metric_labels& labels, std::uint64_t value);
  // A histogram family's series: name_bucket{...,le="b"} cumulative, le="+Inf", name_sum, name_count.
  void histogram(std::string_view name, const metric_labels& labels, const histogram_data& h);

  const std::string& text() const noexcept { return out_; }
  std::string str() && { return std::move(out_); }

  static std::string escape_label_value(std::string_view value);
  static std::string escape_help(std::string_view help);
  // "+Inf", "-Inf", "NaN", integers without a fraction ("3"), else the shortest round-trip form.
  static std::string format_value(double value);

 private:
  void write_series(std::string_view name, const metric_labels& labels, std::string_view extra_label,
                    std::string_view extra_value, std::string_view value);
  void check_sample_name(std::string_view name, bool histogram_part) const;

  std::string out_;
  std::string current_;
  metric_type current_type_ = metric_type::untyped;
  std::set<std::string, std::less<>> announced_;
};

}  // namespace sluice::io
