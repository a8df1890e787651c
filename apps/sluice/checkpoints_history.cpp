// The checkpoint history part of `sluice checkpoints DIR` (checkpoints_history.hpp).

#include "checkpoints_history.hpp"

#include <sluice/snapshot/checkpoint_report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <variant>
#include <vector>

namespace sluice::apps {
namespace {

namespace snap = sluice::snapshot;
using json = nlohmann::json;

using row = std::vector<std::string>;

// Left-aligned columns, two spaces apart; the last column is not padded.
std::string format_rows(const std::vector<row>& rows) {
  std::vector<std::size_t> widths;
  for (const row& r : rows) {
    if (widths.size() < r.size()) widths.resize(r.size(), 0);
    for (std::size_t c = 0; c < r.size(); ++c) widths[c] = std::max(widths[c], r[c].size());
  }
  std::string out;
  for (const row& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line.append(widths[c] - r[c].size() + 2, ' ');
    }
    out += line;
    out += '\n';
  }
  return out;
}

std::string outcome_text(const snap::history_checkpoint& c) {
  std::string text = c.completed ? "completed" : fmt::format("aborted ({}): {}", c.reason, c.detail);
  if (c.switched_to_unaligned()) {
    std::string at;
    for (const snap::history_task& t : c.task_breakdown) {
      if (!t.switched_to_unaligned) continue;
      if (!at.empty()) at += ", ";
      at += t.name.empty() ? fmt::format("task {}", t.task) : t.name;
    }
    text += "; switched to unaligned at ";
    text += at;
  }
  return text;
}

// The newest `recent` events of kind T, oldest first.
template <typename T>
std::vector<const T*> newest(const std::vector<snap::history_event>& events, std::size_t recent) {
  std::vector<const T*> out;
  for (auto it = events.rbegin(); it != events.rend() && out.size() < recent; ++it) {
    if (const T* e = std::get_if<T>(&*it)) out.push_back(e);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string counts_text(const snap::history_summary& s) {
  std::string aborted = fmt::format("{} aborted", s.aborted);
  if (!s.aborted_by_reason.empty()) {
    std::string by;
    for (const auto& [reason, n] : s.aborted_by_reason) by += fmt::format("{}{} {}", by.empty() ? "" : ", ", reason, n);
    aborted += fmt::format(" ({})", by);
  }
  const auto plural = [](std::size_t n) { return n == 1 ? "" : "s"; };
  return fmt::format("{} completed, {}, {} switched to unaligned; {} start{}, {} restore{}\n", s.completed, aborted,
                     s.switched_to_unaligned, s.starts, plural(s.starts), s.restores, plural(s.restores));
}

json summary_json(const snap::history_contents& h, const snap::history_summary& s) {
  json j{{"v", snap::history_format_version},
         {"event", "summary"},
         {"events", h.events.size()},
         {"skipped_lines", h.skipped_lines},
         {"completed", s.completed},
         {"aborted", s.aborted},
         {"aborted_by_reason", s.aborted_by_reason},
         {"switched_to_unaligned", s.switched_to_unaligned},
         {"starts", s.starts},
         {"restores", s.restores}};
  if (s.last_completed != nullptr) {
    j["last_completed"] = json::parse(snap::encode_history_line(*s.last_completed));
  } else {
    j["last_completed"] = nullptr;
  }
  return j;
}

}  // namespace

std::string format_duration(std::chrono::nanoseconds d) {
  const double ns = static_cast<double>(d.count());
  if (d < std::chrono::microseconds(1)) return fmt::format("{}ns", d.count());
  if (d < std::chrono::milliseconds(1)) return fmt::format("{:.0f}us", ns / 1e3);
  if (d < std::chrono::seconds(1)) return fmt::format("{:.1f}ms", ns / 1e6);
  return fmt::format("{:.2f}s", ns / 1e9);
}

std::string format_history_text(const snap::history_contents& h, std::size_t recent) {
  const snap::history_summary s = snap::summarize(h.events);
  std::string out = fmt::format("History ({}: {} events{}):\n", snap::history_file_name, h.events.size(),
                                h.skipped_lines > 0 ? fmt::format(", {} unreadable lines skipped", h.skipped_lines)
                                                    : std::string());
  const auto checkpoints = newest<snap::history_checkpoint>(h.events, recent);
  if (checkpoints.empty()) {
    out += "  no checkpoint ended yet\n";
  } else {
    std::vector<row> rows{
        {"ID", "TRIGGERED (UTC)", "MODE", "DURATION", "ALIGNMENT", "SYNC", "OPERATOR", "CHANNEL", "OUTCOME"}};
    for (const snap::history_checkpoint* c : checkpoints) {
      rows.push_back({std::to_string(c->id), snap::format_iso8601_utc(c->triggered_unix_ms),
                      std::string(snap::to_string(c->mode)), format_duration(c->duration),
                      format_duration(c->max_alignment_duration), format_duration(c->max_sync_duration),
                      snap::format_size(c->operator_state_bytes),
                      snap::format_size(c->channel_state_bytes), outcome_text(*c)});
    }
    out += format_rows(rows);
  }
  if (s.last_completed != nullptr) {
    out += fmt::format("\nLast completed checkpoint {}, per task:\n", s.last_completed->id);
    std::vector<row> rows{
        {"TASK", "START DELAY", "ALIGNMENT", "SYNC", "WRITE", "FSYNC", "OPERATOR", "CHANNEL", "UNALIGNED"}};
    for (const snap::history_task& t : s.last_completed->task_breakdown) {
      rows.push_back({t.name.empty() ? fmt::format("task {}", t.task) : t.name,
                      t.start_delay ? format_duration(*t.start_delay) : std::string("-"),
                      format_duration(t.alignment_duration), format_duration(t.sync_duration),
                      format_duration(t.write_duration),
                      format_duration(t.fsync_duration), snap::format_size(t.operator_state_bytes),
                      snap::format_size(t.channel_state_bytes), t.switched_to_unaligned ? "switched" : "no"});
    }
    out += format_rows(rows);
  }
  const auto starts = newest<snap::history_start>(h.events, recent);
  if (!starts.empty()) {
    out += "\nStarts:\n";
    std::vector<row> rows{{"STARTED (UTC)", "RESUMED FROM", "RESTORE"}};
    for (const snap::history_start* st : starts) {
      rows.push_back({snap::format_iso8601_utc(st->unix_ms),
                      st->resumed_from ? fmt::format("chk-{}", *st->resumed_from) : std::string("- (fresh start)"),
                      format_duration(st->restore_duration)});
    }
    out += format_rows(rows);
  }
  out += '\n';
  out += counts_text(s);
  return out;
}

std::string format_history_json(const snap::history_contents& h, std::size_t recent) {
  std::string out;
  const auto checkpoints = newest<snap::history_checkpoint>(h.events, recent);
  const auto starts = newest<snap::history_start>(h.events, recent);
  for (const snap::history_event& e : h.events) {
    const void* at = std::visit([](const auto& x) -> const void* { return &x; }, e);
    const bool listed = std::any_of(checkpoints.begin(), checkpoints.end(), [at](const void* p) { return p == at; }) ||
                        std::any_of(starts.begin(), starts.end(), [at](const void* p) { return p == at; });
    if (listed) out += snap::encode_history_line(e);
  }
  out += summary_json(h, snap::summarize(h.events)).dump() + "\n";
  return out;
}

}  // namespace sluice::apps
