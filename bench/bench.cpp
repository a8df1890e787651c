// The benchmark registry, the reporter (human lines or JSON objects) and measurement helpers.

#include "bench.hpp"

#include <sluice/snapshot/checkpoint_report.hpp>

#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace sluice::bench {

namespace {

std::vector<std::unique_ptr<benchmark>>& registry() {
  static std::vector<std::unique_ptr<benchmark>> all;
  return all;
}

void append_json_string(std::string& out, std::string_view s) { out += snapshot::json_string(s); }

void append_json_value(std::string& out, const field_value& v) {
  if (const auto* d = std::get_if<double>(&v)) {
    // JSON has no NaN or infinity.
    if (std::isfinite(*d)) out += fmt::format("{}", *d); else out += "null";
  } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
    out += fmt::format("{}", *i);
  } else if (const auto* u = std::get_if<std::uint64_t>(&v)) {
    out += fmt::format("{}", *u);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    append_json_string(out, *s);
  } else {
    out += std::get<bool>(v) ? "true" : "false";
  }
}

}  // namespace

void register_benchmark(std::unique_ptr<benchmark> b) { registry().push_back(std::move(b)); }

std::vector<benchmark*> registered() {
  std::vector<benchmark*> out;
  for (auto& b : registry()) out.push_back(b.get());
  std::sort(out.begin(), out.end(), [](benchmark* a, benchmark* b) { return a->name() < b->name(); });
  return out;
}

void reporter::result(std::string_view bench, std::string_view text, const std::vector<field>& fields) const {
  if (!json_) {
    fmt::print("{}\n", text);
    std::fflush(stdout);
    return;
  }
  std::string line = "{\"bench\": ";
  append_json_string(line, bench);
  for (const field& f : fields) {
    line += ", ";
    append_json_string(line, f.key);
    line += ": ";
    append_json_value(line, f.value);
  }
  line += "}\n";
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

void reporter::note(std::string_view text) const {
  std::FILE* to = json_ ? stderr : stdout;
  fmt::print(to, "{}\n", text);
  std::fflush(to);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

paired_result measure_paired(unsigned runs, const std::function<double()>& figure,
                             const std::function<double()>& baseline) {
  if (runs == 0) throw std::invalid_argument("--runs must be at least 1");
  paired_result r;
  for (unsigned i = 0; i < runs; ++i) {
    if (i % 2 == 0) {
      r.figure_samples.push_back(figure());
      r.baseline_samples.push_back(baseline());
    } else {
      r.baseline_samples.push_back(baseline());
      r.figure_samples.push_back(figure());
    }
  }
  r.figure = median(r.figure_samples);
  r.baseline = median(r.baseline_samples);
  return r;
}

void chart_paired(const reporter& out, const std::string& category, const std::string& figure_series,
                  const std::string& baseline_series, const paired_result& r, double scale, double baseline_scale) {
  bench::chart* c = out.chart();
  if (c == nullptr) return;
  std::vector<double> figure = r.figure_samples;
  std::vector<double> baseline = r.baseline_samples;
  for (double& v : figure) v *= scale;
  for (double& v : baseline) v *= baseline_scale;
  c->add(category, figure_series, std::move(figure));
  c->add(category, baseline_series, std::move(baseline));
  if (r.baseline > 0) c->annotate(category, fmt::format("ratio {:.2f}", r.figure * scale / (r.baseline * baseline_scale)));
}

std::string human_rate(double per_second) {
  if (per_second >= 1e9) return fmt::format("{:.2f} G", per_second / 1e9);
  if (per_second >= 1e6) return fmt::format("{:.2f} M", per_second / 1e6);
  if (per_second >= 1e3) return fmt::format("{:.1f} k", per_second / 1e3);
  return fmt::format("{:.1f} ", per_second);
}

std::string human_bytes(double bytes) {
  constexpr double kib = 1024.0;
  if (bytes >= kib * kib * kib) return fmt::format("{:.2f} GiB", bytes / (kib * kib * kib));
  if (bytes >= kib * kib) return fmt::format("{:.1f} MiB", bytes / (kib * kib));
  if (bytes >= kib) return fmt::format("{:.1f} KiB", bytes / kib);
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace sluice::bench
