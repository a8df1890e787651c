// See prometheus_text.hpp.

#include <sluice/io/prometheus_text.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace sluice::io {

namespace {

bool valid_name(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

const char* type_name(metric_type t) {
  switch (t) {
    case metric_type::counter: return "counter";
    case metric_type::gauge: return "gauge";
    case metric_type::histogram: return "histogram";
    case metric_type::untyped: return "untyped";
  }
  return "untyped";
}

}  // namespace

histogram_data::histogram_data(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw std::invalid_argument("histogram: bucket bounds must be finite and strictly ascending");
    }
  }
  counts_.assign(bounds_.size() + 1, 0);
}

void histogram_data::observe(double value) noexcept {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // first bound >= value: le
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

std::string prometheus_text::escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string prometheus_text::escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string prometheus_text::format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) return fmt::format("{}", static_cast<long long>(value));
  return fmt::format("{}", value);
}

void prometheus_text::family(std::string_view name, metric_type type, std::string_view help) {
  if (!valid_name(name, true)) throw std::logic_error(fmt::format("metrics: bad metric name '{}'", name));
  if (!announced_.emplace(name).second) {
    throw std::logic_error(fmt::format("metrics: family '{}' announced twice", name));
  }
  current_ = std::string(name);
  current_type_ = type;
  out_.append("# HELP ").append(name).append(" ").append(escape_help(help)).append("\n");
  out_.append("# TYPE ").append(name).append(" ").append(type_name(type)).append("\n");
}

void prometheus_text::check_sample_name(std::string_view name, bool histogram_part) const {
  if (current_.empty() || name != current_) {
    throw std::logic_error(fmt::format("metrics: a sample of '{}' outside its family (current: '{}')", name, current_));
  }
  if ((current_type_ == metric_type::histogram) != histogram_part) {
    throw std::logic_error(fmt::format("metrics: '{}': histogram() is for histograms, sample() for the rest", name));
  }
}

void prometheus_text::write_series(std::string_view name, const metric_labels& labels, std::string_view extra_label,
                                   std::string_view extra_value, std::string_view value) {
  out_.append(name);
  if (!labels.empty() || !extra_label.empty()) {
    out_ += '{';
    bool first = true;
    for (const metric_label& l : labels) {
      if (!valid_name(l.name, false) || l.name.substr(0, 2) == "__" || l.name == extra_label) {
        throw std::logic_error(fmt::format("metrics: '{}': bad label name '{}'", name, l.name));
      }
      if (!first) out_ += ',';
      first = false;
      out_.append(l.name).append("=\"").append(escape_label_value(l.value)).append("\"");
    }
    if (!extra_label.empty()) {
      if (!first) out_ += ',';
      out_.append(extra_label).append("=\"").append(extra_value).append("\"");
    }
    out_ += '}';
  }
  out_.append(" ").append(value).append("\n");
}

void prometheus_text::sample(std::string_view name, const metric_labels& labels, double value) {
  check_sample_name(name, false);
  write_series(name, labels, {}, {}, format_value(value));
}

void prometheus_text::sample(std::string_view name, const metric_labels& labels, std::uint64_t value) {
  check_sample_name(name, false);
  write_series(name, labels, {}, {}, fmt::format("{}", value));
}

void prometheus_text::histogram(std::string_view name, const metric_labels& labels, const histogram_data& h) {
  check_sample_name(name, true);
  const std::string bucket = std::string(name) + "_bucket";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.upper_bounds().size(); ++i) {
    cumulative += h.counts()[i];
    write_series(bucket, labels, "le", format_value(h.upper_bounds()[i]), fmt::format("{}", cumulative));
  }
  cumulative += h.counts().back();
  write_series(bucket, labels, "le", "+Inf", fmt::format("{}", cumulative));
  write_series(std::string(name) + "_sum", labels, {}, {}, format_value(h.sum()));
  write_series(std::string(name) + "_count", labels, {}, {}, fmt::format("{}", h.count()));
}

}  // namespace sluice::io
