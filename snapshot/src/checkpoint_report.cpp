// Formatting for `sluice checkpoints`: see checkpoint_report.hpp.

#include <sluice/snapshot/checkpoint_report.hpp>
#include <sluice/snapshot/storage_error.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>

namespace sluice::snapshot {

namespace {

constexpr std::string_view resume_marker = "<- resume point";
constexpr std::string_view unknown = "-";

// The length of the valid UTF-8 sequence at the start of `s`, or 0 if it is not one (overlong
// forms, surrogates and code points above U+10FFFF are invalid).
std::size_t utf8_sequence_length(std::string_view s) noexcept {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;
    if (b0 == 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return n;
}

template <class T>
std::string json_number_or_null(bool known, T value) {
  return known ? fmt::format("{}", value) : std::string("null");
}

// [3,5], or null without a manifest.
std::string json_ids_or_null(bool known, const std::vector<checkpoint_id>& ids) {
  if (!known) return "null";
  std::string out = "[";
  for (const checkpoint_id id : ids) out += fmt::format("{}{}", out.size() > 1 ? "," : "", id);
  return out + "]";
}

// "chk-3,chk-5", or "none".
std::string requires_text(const std::vector<checkpoint_id>& ids) {
  if (ids.empty()) return "none";
  std::string out;
  for (const checkpoint_id id : ids) out += fmt::format("{}chk-{}", out.empty() ? "" : ",", id);
  return out;
}

}  // namespace

checkpoint_id resume_point(const std::vector<checkpoint_info>& infos) noexcept {
  checkpoint_id best = no_checkpoint;
  for (const auto& info : infos) {
    if (info.valid && info.id > best) best = info.id;
  }
  return best;
}

std::string format_status(const checkpoint_info& info) {
  if (info.valid) return "valid";
  return fmt::format("invalid ({}): {}", fault_name(info.fault), info.reason);
}

std::string format_iso8601_utc(std::uint64_t unix_ms) {
  using namespace std::chrono;
  const sys_time<milliseconds> at{milliseconds(static_cast<milliseconds::rep>(unix_ms))};
  const sys_days day = floor<days>(at);
  const year_month_day ymd{day};
  const hh_mm_ss<milliseconds> time{at - day};
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), time.hours().count(),
                     time.minutes().count(), time.seconds().count(), time.subseconds().count());
}

std::string format_size(std::uint64_t size_bytes) {
  if (size_bytes < 1024) return fmt::format("{} B", size_bytes);
  constexpr std::array<std::string_view, 6> units = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(size_bytes) / 1024.0;
  std::size_t unit = 0;
  // 1023.96 KiB would round to "1024.0 KiB": move up a unit once the rounded value reaches 1024.
  while (value >= 1023.95 && unit + 1 < units.size()) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, units[unit]);
}

std::string json_string(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence_length(text.substr(i));
    if (n == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  out += '"';
  return out;
}

std::string format_json_line(const checkpoint_info& info, checkpoint_id resume) {
  const bool m = info.has_manifest;
  return fmt::format(
      "{{\"id\":{},\"status\":\"{}\",\"reason\":{},\"fault\":{},\"mode\":{},\"tasks\":{},"
      "\"operator_state_bytes\":{},\"channel_state_bytes\":{},\"size_bytes\":{},\"written_bytes\":{},"
      "\"state_bytes\":{},\"requires\":{},\"created_unix_ms\":{},\"resume_point\":{}}}\n",
      json_number_or_null(info.id != no_checkpoint, info.id), info.valid ? "valid" : "invalid", info.valid ? "null" : json_string(info.reason),
      info.valid ? "null" : json_string(fault_name(info.fault)), m ? json_string(to_string(info.mode)) : "null",
      json_number_or_null(m, info.tasks), json_number_or_null(m, info.operator_state_bytes),
      json_number_or_null(m, info.channel_state_bytes), json_number_or_null(m, info.size_bytes),
      json_number_or_null(m, info.written_bytes),
      json_number_or_null(info.state_bytes.has_value(), info.state_bytes.value_or(0)),
      json_ids_or_null(m, info.requires_checkpoints),
      json_number_or_null(m, info.created_unix_ms), info.id == resume && resume != no_checkpoint);
}

std::string format_table(std::vector<checkpoint_info> infos, checkpoint_id resume) {
  if (infos.empty()) return {};
  // Newest first; entries whose name is not a valid id (id 0) last, by name.
  std::stable_sort(infos.begin(), infos.end(), [](const auto& a, const auto& b) { return a.id > b.id; });

  enum column { id, mode, tasks, op_state, channel_state, written, state, required, created, status, columns };
  using row = std::array<std::string, columns>;
  // Text columns are left-aligned, numbers right-aligned; STATUS is last and never padded.
  constexpr std::array<bool, columns> left = {false, true, false, false, false, false, false, true, true, true};

  std::vector<row> rows;
  rows.reserve(infos.size() + 1);
  rows.push_back(
      {"ID", "MODE", "TASKS", "OPERATOR", "CHANNEL", "WRITTEN", "STATE", "REQUIRES", "CREATED (UTC)", "STATUS"});
  for (const auto& info : infos) {
    const bool m = info.has_manifest;
    std::string status_text = format_status(info);
    if (info.id == resume && resume != no_checkpoint) status_text += fmt::format("  {}", resume_marker);
    rows.push_back({info.name.empty() ? fmt::format("chk-{}", info.id) : info.name, m ? std::string(to_string(info.mode)) : std::string(unknown),
                    m ? fmt::format("{}", info.tasks) : std::string(unknown),
                    m ? format_size(info.operator_state_bytes) : std::string(unknown),
                    m ? format_size(info.channel_state_bytes) : std::string(unknown),
                    m ? format_size(info.written_bytes) : std::string(unknown),
                    info.state_bytes ? format_size(*info.state_bytes) : std::string(unknown),
                    m ? requires_text(info.requires_checkpoints) : std::string(unknown),
                    m ? format_iso8601_utc(info.created_unix_ms) : std::string(unknown), std::move(status_text)});
  }

  std::array<std::size_t, columns> width{};
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < columns; ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < columns; ++c) {
      if (c > 0) out += "  ";
      if (c + 1 == columns) {
        out += r[c];
      } else if (left[c]) {
        out += fmt::format("{:<{}}", r[c], width[c]);
      } else {
        out += fmt::format("{:>{}}", r[c], width[c]);
      }
    }
    out += '\n';
  }
  return out;
}

std::string format_summary(const std::vector<checkpoint_info>& infos, checkpoint_id resume) {
  if (infos.empty()) return "no checkpoints\n";
  const auto valid = std::count_if(infos.begin(), infos.end(), [](const auto& i) { return i.valid; });
  const std::string choice = resume == no_checkpoint ? std::string("starts from scratch (no valid checkpoint)")
                                                     : fmt::format("resumes from chk-{}", resume);
  return fmt::format("{} checkpoint{}, {} valid; a job started now {}\n", infos.size(), infos.size() == 1 ? "" : "s",
                     valid, choice);
}

}  // namespace sluice::snapshot
