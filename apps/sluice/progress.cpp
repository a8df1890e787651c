// progress_line: see progress.hpp.

#include "progress.hpp"

#include <sluice/runtime/assert.hpp>

#include <sluice/snapshot/checkpoint_report.hpp>

#include <fmt/core.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace sluice::apps {
namespace {

constexpr std::string_view clear_to_end = "\x1b[K";
constexpr unsigned default_width = 80;

// 1234567 -> "1,234,567".
std::string grouped(std::uint64_t n) {
  std::string digits = fmt::format("{}", n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// 950 -> "950", 98100 -> "98.1k", 2.5e6 -> "2.5M".
std::string rate(double per_second) {
  if (!(per_second >= 0)) per_second = 0;  // NaN or negative: a caller's bug, shown as 0
  if (per_second < 999.5) return fmt::format("{:.0f}", per_second);
  if (per_second < 999.95e3) return fmt::format("{:.1f}k", per_second / 1e3);
  if (per_second < 999.95e6) return fmt::format("{:.1f}M", per_second / 1e6);
  return fmt::format("{:.1f}G", per_second / 1e9);
}

// 12345 -> "12.3 s", 65000 -> "1m05s", 3725000 -> "1h02m05s".
std::string elapsed(std::uint64_t ms) {
  if (ms < 60'000) return fmt::format("{:.1f} s", static_cast<double>(ms / 100) / 10.0);
  const std::uint64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60);
}

unsigned terminal_width(std::FILE* out) {
  winsize size{};
  if (::ioctl(::fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return default_width;
}

}  // namespace

std::string format_progress(const progress_fields& f) {
  std::string out = elapsed(f.elapsed_ms);
  if (f.done) {
    const double fraction = std::isnan(*f.done) ? 0.0 : std::clamp(*f.done, 0.0, 1.0);
    out += fmt::format(" | {:.0f}%", std::floor(fraction * 100.0));
    if (f.time_left_ms && fraction < 1.0) out += fmt::format(", {} left", elapsed(*f.time_left_ms));
  }
  if (f.records_total) {
    out += fmt::format(" | {} {} read", grouped(*f.records_total), f.unit);
    if (f.bytes_read) out += fmt::format(" ({})", snapshot::format_size(*f.bytes_read));
  }
  if (f.records_per_second) out += fmt::format(" | {} {}/s", rate(*f.records_per_second), f.unit);
  if (f.records_written && *f.records_written > 0) out += fmt::format(" | {} written", grouped(*f.records_written));
  if (f.backpressure) {
    const double fraction = std::isnan(*f.backpressure) ? 0.0 : std::clamp(*f.backpressure, 0.0, 1.0);
    out += fmt::format(" | backpressure {:.0f}%", fraction * 100.0);
  }
  if (f.last_checkpoint) {
    out += fmt::format(" | last chk-{}: {} ms, {}", f.last_checkpoint->id, f.last_checkpoint->duration_ms,
                       snapshot::format_size(f.last_checkpoint->size_bytes));
  }
  if (f.running_checkpoint && f.running_checkpoint->age_ms >= 1000) {
    out += fmt::format(" | chk-{} running {}", f.running_checkpoint->id, elapsed(f.running_checkpoint->age_ms));
  }
  if (f.checkpoints_aborted && *f.checkpoints_aborted > 0) out += fmt::format(" | {} aborted", *f.checkpoints_aborted);
  return out;
}

progress_line::progress_line(options o)
    : out_(o.out),
      draws_(!o.quiet && o.terminal.value_or(::isatty(::fileno(o.out)) == 1)),
      width_(o.width.value_or(draws_ ? terminal_width(o.out) : default_width)),
      start_(o.start) {
  SLUICE_ASSERT(out_ != nullptr, "progress_line: no output stream");
}

progress_line::~progress_line() {
  std::lock_guard lock(output_);
  if (showing_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

void progress_line::set_records(std::uint64_t total, double per_second) {
  fields_.records_total = total;
  fields_.records_per_second = per_second;
}

void progress_line::set_backpressure(double fraction) { fields_.backpressure = fraction; }

void progress_line::set_checkpoint(std::uint64_t id, std::uint64_t duration_ms, std::uint64_t size_bytes) {
  fields_.last_checkpoint = checkpoint_progress{id, duration_ms, size_bytes};
}

void progress_line::set(const progress_fields& fields) { fields_ = fields; }

progress_fields progress_line::fields(clock::time_point now) const {
  progress_fields f = fields_;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start_).count();
  f.elapsed_ms = ms > 0 ? static_cast<std::uint64_t>(ms) : 0;
  return f;
}

void progress_line::update(clock::time_point now) {
  if (!draws_ || finished_) return;
  if (last_draw_ && now - *last_draw_ < redraw_interval) return;
  last_draw_ = now;
  std::string text = format_progress(fields(now));
  // One column short of the width: writing the last column makes some terminals wrap.
  if (width_ > 1 && text.size() >= width_) text.resize(width_ - 1);
  std::lock_guard lock(output_);
  fmt::print(out_, "\r{}{}", text, clear_to_end);
  std::fflush(out_);
  showing_ = true;
  shown_ = std::move(text);
}

void progress_line::print_above(std::string_view line) {
  std::lock_guard lock(output_);
  if (showing_) fmt::print(out_, "\r{}", clear_to_end);
  fmt::print(out_, "{}\n", line);
  if (showing_) fmt::print(out_, "{}", shown_);
  std::fflush(out_);
}

void progress_line::finish(std::string_view summary) {
  std::lock_guard lock(output_);
  if (showing_) fmt::print(out_, "\r{}", clear_to_end);
  fmt::print(out_, "{}\n", summary);
  std::fflush(out_);
  showing_ = false;
  finished_ = true;
}

}  // namespace sluice::apps
