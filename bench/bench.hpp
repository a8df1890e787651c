#pragma once
// Benchmarks: programs that print a figure beside a baseline measured in the same run.
//
// Protocol every benchmark follows:
// - It registers itself (a static `registration<T>`), with a name, a one-line description and its
//   options; `sluice bench --list` shows them and `sluice bench <name> --help` explains them.
// - It repeats each measurement `runs` times, interleaving figure and baseline (alternating which
//   goes first) so that machine noise hits both, and reports the MEDIAN of each and their ratio.
// - It reports through `reporter`: one human-readable line per result, or with `--json` one JSON
//   object per result carrying the named fields plus "bench" and the parameters.
// - A benchmark that `plots()` also fills the reporter's chart (plot.hpp) when `--plot FILE.png`
//   asks for one; the tool draws it after the run.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "plot.hpp"

namespace sluice::bench {

// One command-line option of a benchmark, bound to a member of the benchmark object.
struct option {
  std::string flags;  // e.g. "--ops"
  std::string help;
  std::variant<std::uint64_t*, unsigned*, double*, std::string*, bool*> target;
};

// A JSON field value: numbers, strings, booleans.
using field_value = std::variant<double, std::int64_t, std::uint64_t, std::string, bool>;
struct field {
  std::string key;
  field_value value;
};

class reporter {
 public:
  explicit reporter(bool json, bench::chart* chart = nullptr) noexcept : json_(json), chart_(chart) {}
  bool json() const noexcept { return json_; }
  // The chart to fill, or nullptr when no --plot was asked for.
  bench::chart* chart() const noexcept { return chart_; }
  // Prints `text` (human mode) or {"bench": bench, fields...} (JSON mode), one line, flushed.
  void result(std::string_view bench, std::string_view text, const std::vector<field>& fields) const;
  // Progress and notes: stderr in JSON mode so stdout stays machine-readable.
  void note(std::string_view text) const;

 private:
  bool json_;
  bench::chart* chart_;
};

struct common_options {
  unsigned runs = 5;
  bool json = false;
  std::string plot;  // --plot FILE.png; empty: none
};

class benchmark {
 public:
  virtual ~benchmark() = default;
  virtual std::string_view name() const noexcept = 0;
  virtual std::string_view description() const noexcept = 0;
  // The benchmark's own options; they point into the benchmark object.
  virtual std::vector<option> options() { return {}; }
  // Whether run() fills the reporter's chart (and so whether the benchmark takes --plot).
  virtual bool plots() const noexcept { return false; }
  // Runs every measurement and reports; throws std::exception with an actionable message on failure.
  virtual void run(const common_options& common, const reporter& out) = 0;
};

// All registered benchmarks, sorted by name.
std::vector<benchmark*> registered();
void register_benchmark(std::unique_ptr<benchmark> b);

template <class T>
struct registration {
  registration() { register_benchmark(std::make_unique<T>()); }
};

// --- measurement helpers ----------------------------------------------------------------------

using bench_clock = std::chrono::steady_clock;

inline double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

double median(std::vector<double> values);

// Medians of `runs` interleaved measurements of `figure` and `baseline` (each returns one sample).
// Run i measures figure first when i is even and baseline first when i is odd.
struct paired_result {
  double figure = 0;
  double baseline = 0;
  std::vector<double> figure_samples;
  std::vector<double> baseline_samples;
};
paired_result measure_paired(unsigned runs, const std::function<double()>& figure,
                             const std::function<double()>& baseline);

// Adds a paired result to the reporter's chart, if there is one: both series in `category`, every
// sample multiplied by `scale` (e.g. to the unit of the chart's y axis).
void chart_paired(const reporter& out, const std::string& category, const std::string& figure_series,
                  const std::string& baseline_series, const paired_result& r, double scale = 1.0,
                  double baseline_scale = 1.0);

// Keeps the compiler from optimising `value` (or the computation behind it) away.
template <class T>
inline void do_not_optimize(T const& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}
template <class T>
inline void do_not_optimize(T& value) {
  asm volatile("" : "+r,m"(value) : : "memory");
}

// "12.3 M" style formatting of rates and sizes for the human lines.
std::string human_rate(double per_second);   // 12.3 M
std::string human_bytes(double bytes);       // 1.20 GiB

}  // namespace sluice::bench
