// See status_api.hpp.

#include "status_api.hpp"

#include "job_history.hpp"

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/version.hpp>
#include <sluice/snapshot/checkpoint_history.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;
using json = nlohmann::json;

namespace {

// The stages a stage feeds, each once, in order (a join of two of its branches reads it twice).
json downstreams_of(const stage_plan& sp) {
  std::vector<std::size_t> out;
  for (const output_port& p : sp.outputs) {
    if (out.empty() || out.back() != p.consumer) out.push_back(p.consumer);
  }
  return out;
}

constexpr std::string_view checkpoint_prefix = "/api/checkpoints/";
constexpr std::size_t default_recent = 200;
constexpr std::size_t max_recent = 5000;

// Names and paths come from the user's code and the file system and need not be UTF-8: such bytes
// become U+FFFD instead of failing the view.
std::string text_of(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

double ms(std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e6; }

// ?recent=N: N within [1, max_recent]; absent or unreadable: the default.
std::size_t recent_of(std::string_view query) {
  constexpr std::string_view key = "recent=";
  for (std::size_t at = 0; at < query.size();) {
    std::size_t end = query.find('&', at);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view part = query.substr(at, end - at);
    if (part.rfind(key, 0) == 0) {
      std::size_t n = 0;
      const std::string_view digits = part.substr(key.size());
      const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (ec == std::errc() && p == digits.data() + digits.size() && n > 0) return std::min(n, max_recent);
    }
    at = end + 1;
  }
  return default_recent;
}

json checkpoint_json(const ss::history_checkpoint& c, bool with_tasks) {
  json j{{"id", c.id},
         {"mode", std::string(ss::to_string(c.mode))},
         {"triggered_unix_ms", c.triggered_unix_ms},
         {"duration_ms", ms(c.duration)},
         {"alignment_ms", ms(c.max_alignment_duration)},
         {"sync_ms", ms(c.max_sync_duration)},
         {"operator_state_bytes", c.operator_state_bytes},
         {"channel_state_bytes", c.channel_state_bytes},
         {"tasks", c.tasks},
         {"acknowledged", c.acknowledged},
         {"outcome", c.completed ? "completed" : "aborted"},
         {"switched_to_unaligned", c.switched_to_unaligned()}};
  if (!c.completed) {
    j["reason"] = c.reason;
    j["detail"] = c.detail;
  }
  if (with_tasks) {
    json tasks = json::array();
    for (const ss::history_task& t : c.task_breakdown) {
      tasks.push_back({{"task", t.task},
                       {"name", t.name},
                       {"start_delay_ms", t.start_delay ? json(ms(*t.start_delay)) : json(nullptr)},
                       {"alignment_ms", ms(t.alignment_duration)},
                       {"sync_ms", ms(t.sync_duration)},
                       {"write_ms", ms(t.write_duration)},
                       {"fsync_ms", ms(t.fsync_duration)},
                       {"operator_state_bytes", t.operator_state_bytes},
                       {"channel_state_bytes", t.channel_state_bytes},
                       {"switched_to_unaligned", t.switched_to_unaligned}});
    }
    j["task_breakdown"] = std::move(tasks);
  }
  return j;
}

// A task is hot (busy, or backpressured) from this share of its time on.
constexpr double hot_share = 0.5;

json settings_json(const checkpoint_settings_view& c) {
  const bool timed_alignment = c.mode == ss::to_string(ss::checkpoint_mode::aligned_timeout);
  return {{"dir", c.dir},
          {"mode", c.mode},
          {"interval_ms", c.interval.count()},
          {"min_pause_ms", c.min_pause.count()},
          {"timeout_ms", c.timeout.count()},
          {"alignment_timeout_ms", timed_alignment ? json(c.alignment_timeout.count()) : json(nullptr)},
          {"tolerable_failures", c.tolerable_failures ? json(*c.tolerable_failures) : json(nullptr)},
          {"retained", c.retained},
          {"history_entries", c.history_entries}};
}

// The bottleneck: a hot busy task that a backpressured task feeds (tasks of this worker only).
void mark_bottlenecks(json& tasks, const job_plan& plan) {
  std::map<ss::task_id, const json*> by_id;
  for (const json& t : tasks) by_id[t["id"].get<ss::task_id>()] = &t;
  const auto backpressured = [&](std::size_t stage) {
    const stage_plan& sp = plan.stages().at(stage);
    for (std::size_t i = 0; i < sp.parallelism; ++i) {
      auto it = by_id.find(static_cast<ss::task_id>(sp.first_task + i));
      if (it != by_id.end() && it->second->value("backpressured_ratio", 0.0) >= hot_share) return true;
    }
    return false;
  };
  for (json& t : tasks) {
    if (!t["here"].get<bool>()) continue;
    const double busy = t["busy_ratio"].get<double>();
    bool fed_by_backpressured = false;
    for (std::size_t up : plan.stages().at(t["stage"].get<std::size_t>()).upstreams) {
      fed_by_backpressured = fed_by_backpressured || backpressured(up);
    }
    t["bottleneck"] = busy >= hot_share && busy >= t["backpressured_ratio"].get<double>() && fed_by_backpressured;
  }
}

json error_json(std::string message) { return {{"error", std::move(message)}}; }

json in_flight_json(const std::optional<ss::coordinator>* coordinator, std::chrono::steady_clock::time_point now) {
  if (coordinator == nullptr || !coordinator->has_value()) return nullptr;
  const std::optional<ss::coordinator::running_checkpoint> running = (*coordinator)->oldest_in_flight();
  if (!running) return nullptr;
  return {{"id", running->id}, {"age_ms", ms(now - running->triggered_at)}};
}

}  // namespace

checkpoint_settings_view checkpoint_settings_of(const job_settings& settings) {
  checkpoint_settings_view v;
  v.dir = settings.checkpoint_dir;
  v.mode = std::string(ss::to_string(settings.mode));
  v.interval = settings.checkpoint_interval;
  v.min_pause = settings.min_pause.value_or(settings.checkpoint_interval / 2);  // as the runner's
  v.timeout = settings.checkpoint_timeout;
  v.alignment_timeout = settings.alignment_timeout;
  v.tolerable_failures = settings.tolerable_checkpoint_failures;
  v.retained = settings.retained_checkpoints;
  v.history_entries = settings.checkpoint_history_entries;
  return v;
}

void status_api::started(std::optional<ss::checkpoint_id> resumed_from, std::chrono::nanoseconds restore_duration,
                         std::chrono::steady_clock::time_point at) {
  started_ = true;
  resumed_from_ = resumed_from;
  restore_duration_ = restore_duration;
  started_at_ = at;
}

void status_api::checkpoint_ended(const ss::checkpoint_stats& stats) {
  if (stats.outcome.completed()) {
    ++completed_;
    last_completed_ = stats.id;
  } else {
    ++aborted_;
  }
}

void status_api::executors_started(const std::vector<executor_sample>& executors) {
  idle_.resize(executors.size());
  for (std::size_t e = 0; e < executors.size(); ++e) idle_[e].start(executors[e].now, seconds(executors[e].counters.waited));
}

bool status_api::serves(std::string_view path) noexcept {
  return path == "/api/job" || path == "/api/graph" || path == "/api/checkpoints" ||
         path.rfind(checkpoint_prefix, 0) == 0;
}

rt::task<io::http_response> status_api::respond(io::http_request request) {
  std::string body;
  if (request.path == "/api/job") {
    body = co_await job_view();
  } else if (request.path == "/api/graph") {
    body = co_await graph_view();
  } else if (request.path == "/api/checkpoints") {
    body = co_await checkpoints_view(recent_of(request.query));
  } else if (request.path == "/api/checkpoints/latest") {
    body = co_await latest_view();
  } else if (request.path.rfind(checkpoint_prefix, 0) == 0) {
    co_return co_await checkpoint_view(request.path.substr(checkpoint_prefix.size()));
  } else {
    co_return io::http_response::text(404, "not found\n");
  }
  io::http_response r;
  r.content_type = "application/json";
  r.headers.emplace_back("Cache-Control", "no-store");
  r.body = std::move(body);
  co_return r;
}

rt::task<std::string> status_api::job_view() {
  const auto now = from_.engine->at(0).now();
  const std::vector<executor_sample> executors = co_await sample_executors(*from_.engine, from_.memory);
  json backends = json::array();
  for (const executor_sample& e : executors) backends.push_back(e.backend);
  json j{{"job", from_.job},
         {"version", std::string(rt::version())},
         {"state", !started_ ? "starting" : from_.state ? from_.state() : "running"},
         {"uptime_ms", started_ ? ms(now - started_at_) : 0.0},
         {"resumed_from", resumed_from_ ? json(*resumed_from_) : json(nullptr)},
         {"restore_ms", ms(restore_duration_)},
         {"executors", executors.size()},
         {"backends", std::move(backends)},
         {"worker", from_.worker},
         {"checkpoint_dir", from_.checkpoints.dir},
         {"checkpoint_mode", from_.checkpoints.mode},
         {"checkpoint_interval_ms", from_.checkpoints.interval.count()},
         {"checkpoint_settings", settings_json(from_.checkpoints)},
         {"history", from_.keeps_history}};
  json cp{{"completed", completed_},
          {"aborted", aborted_},
          {"last_completed", last_completed_ ? json(*last_completed_) : json(nullptr)},
          {"in_flight", in_flight_json(from_.coordinator, now)}};
  j["checkpoints"] = std::move(cp);
  if (from_.progress && started_) {
    const job_progress p = co_await from_.progress();
    j["progress"] = {{"source_records", p.source_records},
                     {"records_in", p.records_in},
                     {"records_written", p.records_written},
                     {"input_done_bytes", p.input_done},
                     {"input_total_bytes", p.input_total}};
  } else {
    j["progress"] = nullptr;
  }
  co_return text_of(j);
}

rt::task<std::string> status_api::graph_view() {
  const std::vector<task_sample> tasks = co_await sample_tasks(*from_.tasks);
  const std::vector<executor_sample> executors = co_await sample_executors(*from_.engine, from_.memory);
  json stages = json::array();
  json all_tasks = json::array();
  if (from_.builder != nullptr && from_.plan != nullptr) {
    for (std::size_t s = 0; s < from_.plan->stages().size(); ++s) {
      const stage_plan& sp = from_.plan->stages()[s];
      const stage_def& def = from_.builder->stages().at(s);
      stages.push_back({{"id", s},
                        {"name", def.name},
                        {"parallelism", sp.parallelism},
                        {"first_task", sp.first_task},
                        {"upstreams", sp.upstreams},
                        {"downstream", sp.outputs.empty() ? json(nullptr) : json(sp.outputs.front().consumer)},
                        {"downstreams", downstreams_of(sp)},
                        {"source", sp.upstreams.empty()},
                        {"sink", def.sink},
                        {"chain", def.identity}});
    }
    // Every task of the plan; those of other workers with where they run only.
    std::map<ss::task_id, const task_sample*> here;
    for (const task_sample& t : tasks) here[t.id] = &t;
    for (const task_plan& tp : from_.plan->tasks()) {
      json t{{"id", tp.id},
             {"name", fmt::format("{}#{}", from_.builder->stages().at(tp.stage).name, tp.subtask)},
             {"stage", tp.stage},
             {"subtask", tp.subtask},
             {"worker", tp.worker},
             {"executor", tp.executor}};
      auto it = here.find(tp.id);
      const bool present = it != here.end() && it->second->present;
      t["here"] = present;
      if (present) add_task_figures(t, *it->second);
      all_tasks.push_back(std::move(t));
    }
    mark_bottlenecks(all_tasks, *from_.plan);
  }
  json execs = json::array();
  idle_.resize(executors.size());
  for (std::size_t e = 0; e < executors.size(); ++e) {
    const executor_sample& x = executors[e];
    const double idle = idle_[e].update(x.now, seconds(x.counters.waited));
    execs.push_back({{"index", e},
                     {"backend", x.backend},
                     {"busy_ratio", std::clamp(1.0 - idle, 0.0, 1.0)},
                     {"submissions", x.counters.submitted},
                     {"in_flight", x.in_flight},
                     {"inbox", x.inbox},
                     {"buffers", x.segments_total},
                     {"buffers_in_use", x.segments_total - x.segments_free}});
  }
  json j{{"job", from_.job}, {"stages", std::move(stages)}, {"tasks", std::move(all_tasks)}, {"executors", std::move(execs)}};
  co_return text_of(j);
}

// A task's own figures (it runs here), into `t`.
void status_api::add_task_figures(json& t, const task_sample& s) {
  auto [entry, fresh] = rates_.try_emplace(s.id);
  task_rates& r = entry->second;
  if (fresh && started_) {
    // The first window starts with the task: its first rates are its averages so far.
    r.in.start(started_at_, 0);
    r.out.start(started_at_, 0);
    r.backpressured.start(started_at_, 0);
    r.idle.start(started_at_, 0);
  }
  t["records_in"] = s.records_in;
  t["records_out"] = s.records_out;
  t["bytes_in"] = s.bytes_in;
  t["bytes_out"] = s.bytes_out;
  t["records_in_per_s"] = r.in.update(s.now, static_cast<double>(s.records_in));
  t["records_out_per_s"] = r.out.update(s.now, static_cast<double>(s.records_out));
  // Both waits over the same window; they never overlap, so their sum stays within 1 but for
  // rounding, which the scaling absorbs.
  double backpressured = s.has_partition ? std::clamp(r.backpressured.update(s.now, s.backpressured_s), 0.0, 1.0) : 0.0;
  double idle = std::clamp(r.idle.update(s.now, s.idle_s), 0.0, 1.0);
  if (idle + backpressured > 1.0) {
    const double scale = 1.0 / (idle + backpressured);
    idle *= scale;
    backpressured *= scale;
  }
  t["busy_ratio"] = std::clamp(1.0 - idle - backpressured, 0.0, 1.0);
  t["idle_ratio"] = idle;
  t["backpressured_ratio"] = backpressured;
  t["backpressured"] = s.backpressured_now;
  t["watermark"] = s.watermark ? json(*s.watermark) : json(nullptr);
  t["buffers_in_use"] = {{"output", s.output_in_use}, {"priority", s.priority_in_use}, {"input", s.input_in_use}};
  t["credits_outstanding"] = s.credits_outstanding;
}

rt::task<std::string> status_api::checkpoints_view(std::size_t recent) {
  const std::string path = fmt::format("{}/{}", from_.checkpoints.dir, ss::history_file_name);
  io::result<std::string> text = co_await read_history_text(path);
  json j{{"file", path}, {"recent", recent}};
  if (!text) {
    j["error"] = text.error().message();
    text = std::string();
  }
  const ss::history_contents contents = ss::parse_history(*text);
  const ss::history_summary summary = ss::summarize(contents.events);
  j["skipped_lines"] = contents.skipped_lines;
  j["summary"] = {{"completed", summary.completed},
                  {"aborted", summary.aborted},
                  {"aborted_by_reason", summary.aborted_by_reason},
                  {"switched_to_unaligned", summary.switched_to_unaligned},
                  {"starts", summary.starts},
                  {"restores", summary.restores}};
  json checkpoints = json::array();
  json starts = json::array();
  std::size_t skip = 0;
  std::size_t total_checkpoints = 0;
  for (const ss::history_event& e : contents.events) total_checkpoints += std::holds_alternative<ss::history_checkpoint>(e);
  if (total_checkpoints > recent) skip = total_checkpoints - recent;
  for (const ss::history_event& e : contents.events) {
    if (const auto* c = std::get_if<ss::history_checkpoint>(&e)) {
      if (skip > 0) {
        --skip;
        continue;
      }
      checkpoints.push_back(checkpoint_json(*c, false));
    } else if (const auto* s = std::get_if<ss::history_start>(&e)) {
      starts.push_back({{"unix_ms", s->unix_ms},
                        {"job", s->job},
                        {"resumed_from", s->resumed_from ? json(*s->resumed_from) : json(nullptr)},
                        {"restore_ms", ms(s->restore_duration)}});
    }
  }
  j["checkpoints"] = std::move(checkpoints);
  j["starts"] = std::move(starts);
  j["in_flight"] = in_flight_json(from_.coordinator, from_.engine->at(0).now());
  co_return text_of(j);
}

rt::task<std::string> status_api::latest_view() {
  const std::string path = fmt::format("{}/{}", from_.checkpoints.dir, ss::history_file_name);
  io::result<std::string> text = co_await read_history_text(path);
  if (!text) co_return text_of(nullptr);
  const ss::history_contents contents = ss::parse_history(*text);
  const ss::history_summary summary = ss::summarize(contents.events);
  if (summary.last_completed == nullptr) co_return text_of(nullptr);
  co_return text_of(checkpoint_json(*summary.last_completed, true));
}

// /api/checkpoints/<id>: the newest record of that id in the history, with its tasks.
rt::task<io::http_response> status_api::checkpoint_view(std::string id_text) {
  io::http_response r;
  r.content_type = "application/json";
  r.headers.emplace_back("Cache-Control", "no-store");
  ss::checkpoint_id id = ss::no_checkpoint;
  const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
  if (id_text.empty() || ec != std::errc() || end != id_text.data() + id_text.size() || id == ss::no_checkpoint) {
    r.status = 400;
    r.body = text_of(error_json(fmt::format(
        "'{}' is not a checkpoint id: /api/checkpoints/<id> takes a checkpoint's number (or 'latest')", id_text)));
    co_return r;
  }
  const std::string path = fmt::format("{}/{}", from_.checkpoints.dir, ss::history_file_name);
  io::result<std::string> text = co_await read_history_text(path);
  const ss::history_contents contents = text ? ss::parse_history(*text) : ss::history_contents{};
  const ss::history_checkpoint* found = nullptr;
  for (const ss::history_event& e : contents.events) {
    if (const auto* c = std::get_if<ss::history_checkpoint>(&e); c != nullptr && c->id == id) found = c;
  }
  if (found == nullptr) {
    r.status = 404;
    const std::string why = !text ? text.error().message()
                            : from_.checkpoints.history_entries == 0
                                ? "the job keeps no history: checkpoint_history_entries is 0"
                                : fmt::format("it keeps the newest {} events", from_.checkpoints.history_entries);
    r.body = text_of(error_json(fmt::format("checkpoint {} is not in the history '{}' ({})", id, path, why)));
    co_return r;
  }
  r.body = text_of(checkpoint_json(*found, true));
  co_return r;
}

}  // namespace sluice::dataflow::detail
