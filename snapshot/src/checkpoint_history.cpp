// The history file's format and reader (checkpoint_history.hpp).

#include <sluice/io/fs.hpp>
#include <sluice/snapshot/checkpoint_history.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>

namespace sluice::snapshot {

namespace {

using json = nlohmann::json;

// The largest history file a tool reads (2N lines of a large job stay far below).
constexpr std::size_t max_history_file_bytes = std::size_t{256} << 20;

std::optional<checkpoint_mode> mode_named(std::string_view name) {
  for (checkpoint_mode m : {checkpoint_mode::aligned, checkpoint_mode::unaligned, checkpoint_mode::aligned_timeout,
                            checkpoint_mode::at_least_once}) {
    if (to_string(m) == name) return m;
  }
  return std::nullopt;
}

std::chrono::nanoseconds ns_at(const json& j, const char* key) {
  return std::chrono::nanoseconds(j.value(key, std::int64_t{0}));
}

json encode_task(const history_task& t) {
  json j{{"task", t.task},
         {"name", t.name},
         {"alignment_ns", t.alignment_duration.count()},
         {"sync_ns", t.sync_duration.count()},
         {"write_ns", t.write_duration.count()},
         {"fsync_ns", t.fsync_duration.count()},
         {"operator_state_bytes", t.operator_state_bytes},
         {"channel_state_bytes", t.channel_state_bytes},
         {"switched_to_unaligned", t.switched_to_unaligned}};
  if (t.start_delay) j["start_delay_ns"] = t.start_delay->count();
  return j;
}

history_task decode_task(const json& j) {
  history_task t;
  t.task = j.value("task", task_id{0});
  t.name = j.value("name", std::string());
  if (j.contains("start_delay_ns") && j["start_delay_ns"].is_number()) t.start_delay = ns_at(j, "start_delay_ns");
  t.alignment_duration = ns_at(j, "alignment_ns");
  t.sync_duration = ns_at(j, "sync_ns");
  t.write_duration = ns_at(j, "write_ns");
  t.fsync_duration = ns_at(j, "fsync_ns");
  t.operator_state_bytes = j.value("operator_state_bytes", std::uint64_t{0});
  t.channel_state_bytes = j.value("channel_state_bytes", std::uint64_t{0});
  t.switched_to_unaligned = j.value("switched_to_unaligned", false);
  return t;
}

json encode(const history_checkpoint& c) {
  json j{{"v", history_format_version},
         {"event", "checkpoint"},
         {"id", c.id},
         {"mode", std::string(to_string(c.mode))},
         {"triggered_unix_ms", c.triggered_unix_ms},
         {"duration_ns", c.duration.count()},
         {"max_alignment_ns", c.max_alignment_duration.count()},
         {"max_sync_ns", c.max_sync_duration.count()},
         {"operator_state_bytes", c.operator_state_bytes},
         {"channel_state_bytes", c.channel_state_bytes},
         {"tasks", c.tasks},
         {"acknowledged", c.acknowledged},
         {"outcome", c.completed ? "completed" : "aborted"}};
  if (!c.completed) {
    j["reason"] = c.reason;
    j["detail"] = c.detail;
  }
  json tasks = json::array();
  for (const history_task& t : c.task_breakdown) tasks.push_back(encode_task(t));
  j["task_breakdown"] = std::move(tasks);
  return j;
}

json encode(const history_start& s) {
  json j{{"v", history_format_version},
         {"event", "start"},
         {"unix_ms", s.unix_ms},
         {"job", s.job},
         {"restore_ns", s.restore_duration.count()}};
  j["resumed_from"] = s.resumed_from ? json(*s.resumed_from) : json(nullptr);
  return j;
}

std::optional<history_event> decode(const json& j) {
  if (!j.is_object() || j.value("v", 0) != history_format_version) return std::nullopt;
  const std::string event = j.value("event", std::string());
  if (event == "checkpoint") {
    history_checkpoint c;
    c.id = j.value("id", no_checkpoint);
    const std::optional<checkpoint_mode> mode = mode_named(j.value("mode", std::string()));
    if (c.id == no_checkpoint || !mode) return std::nullopt;
    c.mode = *mode;
    c.triggered_unix_ms = j.value("triggered_unix_ms", std::uint64_t{0});
    c.duration = ns_at(j, "duration_ns");
    c.max_alignment_duration = ns_at(j, "max_alignment_ns");
    c.max_sync_duration = ns_at(j, "max_sync_ns");
    c.operator_state_bytes = j.value("operator_state_bytes", std::uint64_t{0});
    c.channel_state_bytes = j.value("channel_state_bytes", std::uint64_t{0});
    c.tasks = j.value("tasks", std::size_t{0});
    c.acknowledged = j.value("acknowledged", std::size_t{0});
    c.completed = j.value("outcome", std::string()) == "completed";
    c.reason = j.value("reason", std::string());
    c.detail = j.value("detail", std::string());
    if (j.contains("task_breakdown") && j["task_breakdown"].is_array()) {
      for (const json& t : j["task_breakdown"]) {
        if (t.is_object()) c.task_breakdown.push_back(decode_task(t));
      }
    }
    return c;
  }
  if (event == "start") {
    history_start s;
    s.unix_ms = j.value("unix_ms", std::uint64_t{0});
    s.job = j.value("job", std::string());
    if (j.contains("resumed_from") && j["resumed_from"].is_number_unsigned()) {
      s.resumed_from = j["resumed_from"].get<checkpoint_id>();
    }
    s.restore_duration = ns_at(j, "restore_ns");
    return s;
  }
  return std::nullopt;
}

}  // namespace

bool history_checkpoint::switched_to_unaligned() const noexcept {
  for (const history_task& t : task_breakdown) {
    if (t.switched_to_unaligned) return true;
  }
  return false;
}

history_checkpoint history_of(const checkpoint_stats& stats, const std::vector<std::string>& task_names) {
  history_checkpoint c;
  c.id = stats.id;
  c.mode = stats.mode;
  c.triggered_unix_ms = stats.triggered_unix_ms;
  c.duration = stats.duration;
  c.max_alignment_duration = stats.max_alignment_duration;
  c.max_sync_duration = stats.max_sync_duration;
  c.operator_state_bytes = stats.operator_state_bytes;
  c.channel_state_bytes = stats.channel_state_bytes;
  c.tasks = stats.tasks;
  c.acknowledged = stats.acknowledged;
  c.completed = stats.outcome.completed();
  if (!c.completed) {
    c.reason = std::string(to_string(stats.outcome.reason));
    c.detail = stats.outcome.detail;
  }
  c.task_breakdown.reserve(stats.task_breakdown.size());
  for (const task_checkpoint_breakdown& b : stats.task_breakdown) {
    history_task t;
    t.task = b.task;
    if (b.task < task_names.size()) t.name = task_names[b.task];
    t.start_delay = b.start_delay;
    t.alignment_duration = b.alignment_duration;
    t.sync_duration = b.sync_duration;
    t.write_duration = b.write_duration;
    t.fsync_duration = b.fsync_duration;
    t.operator_state_bytes = b.operator_state_bytes;
    t.channel_state_bytes = b.channel_state_bytes;
    t.switched_to_unaligned = b.switched_to_unaligned;
    c.task_breakdown.push_back(std::move(t));
  }
  return c;
}

std::string encode_history_line(const history_event& event) {
  const json j = std::visit([](const auto& e) { return encode(e); }, event);
  // Replacement of invalid UTF-8 (a detail quoting a file name): a line must always encode.
  std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  return line;
}

std::optional<history_event> decode_history_line(std::string_view line) {
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return decode(j);
}

history_contents parse_history(std::string_view text) {
  history_contents out;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    if (end == std::string_view::npos) {
      ++out.skipped_lines;  // torn: the append was cut short
      break;
    }
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    if (line.empty()) continue;
    if (std::optional<history_event> e = decode_history_line(line)) {
      out.events.push_back(std::move(*e));
    } else {
      ++out.skipped_lines;
    }
  }
  return out;
}

io::result<history_contents> read_history_blocking(const std::string& checkpoint_dir) {
  const std::string path = fmt::format("{}/{}", checkpoint_dir, history_file_name);
  std::string text;
  const int rc = io::read_file_blocking(path, text, max_history_file_bytes);
  if (rc != 0) return io::error::from_errno(-rc, fmt::format("read checkpoint history '{}'", path));
  return parse_history(text);
}

history_summary summarize(const std::vector<history_event>& events) {
  history_summary s;
  for (const history_event& e : events) {
    if (const auto* c = std::get_if<history_checkpoint>(&e)) {
      if (c->completed) {
        ++s.completed;
        s.last_completed = c;
      } else {
        ++s.aborted;
        ++s.aborted_by_reason[c->reason];
      }
      if (c->switched_to_unaligned()) ++s.switched_to_unaligned;
    } else if (const auto* st = std::get_if<history_start>(&e)) {
      ++s.starts;
      if (st->resumed_from) ++s.restores;
    }
  }
  return s;
}

}  // namespace sluice::snapshot
