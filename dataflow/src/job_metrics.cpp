// See job_metrics.hpp.

#include "job_metrics.hpp"
#include "process_metrics.hpp"

#include <sluice/runtime/offload.hpp>

#include "status_page.hpp"

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/version.hpp>

#include <fmt/core.h>

#include <algorithm>

namespace sluice::dataflow::detail {

namespace {
// The job's name as a label: "sluice_job", not "job", which is Prometheus' own target label (a
// series' "job" would be renamed "exported_job" at scrape time and clash with the scrape config's).
constexpr const char* job_label = "sluice_job";
}  // namespace

namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;
using io::metric_type;

namespace {

constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::size_t abort_reasons = 8;  // ss::abort_reason's values

// Checkpoint durations and alignments: 1 ms to 10 min.
std::vector<double> checkpoint_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
}

// A snapshot's synchronous part: microseconds for small state, milliseconds would be a stall.
std::vector<double> sync_buckets() {
  return {0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1};
}

}  // namespace

io::result<io::address> parse_metrics_address(std::string_view text) {
  const auto refused = [text](const std::string& why) {
    return io::error(std::make_error_code(std::errc::invalid_argument),
                     fmt::format("metrics address '{}': {}", text, why));
  };
  if (text.rfind("unix:", 0) == 0) return refused("a Unix socket cannot be scraped over HTTP; give HOST:PORT");
  std::string full(text);
  if (!full.empty() && full.front() == ':') full = "0.0.0.0" + full;  // ":9464": every IPv4 interface
  io::result<io::address> parsed = io::address::parse(full);
  if (!parsed) return refused(parsed.error().message());
  return parsed;
}

job_metrics::job_metrics(std::unique_ptr<io::http_server> server, sources from)
    : server_(std::move(server)), from_(std::move(from)), status_(from_), duration_(checkpoint_buckets()),
      alignment_(checkpoint_buckets()), sync_(sync_buckets()) {}

job_metrics::~job_metrics() = default;

io::result<std::unique_ptr<job_metrics>> job_metrics::bind(std::string_view address, sources from) {
  io::result<io::address> at = parse_metrics_address(address);
  if (!at) return std::move(at).error();
  // The handler reaches the job_metrics through a pointer set below, once it exists.
  auto self = std::make_shared<job_metrics*>(nullptr);
  io::http_handler handler = [self](io::http_request request) { return handle(*self, std::move(request)); };
  io::http_server_options options;
  options.max_connections = 64;  // scrapers and curious humans, not a public service
  io::result<std::unique_ptr<io::http_server>> server = io::http_server::listen(*at, std::move(handler), options);
  if (!server) {
    return io::error(server.error().code(), "metrics endpoint: " + server.error().message());
  }
  std::unique_ptr<job_metrics> metrics(new job_metrics(std::move(server).value(), std::move(from)));
  *self = metrics.get();
  return metrics;
}

std::uint16_t job_metrics::port() const noexcept { return server_->local_address().port(); }

void job_metrics::checkpoint_ended(const ss::checkpoint_stats& stats) {
  status_.checkpoint_ended(stats);
  if (stats.outcome.completed()) {
    ++completed_;
    duration_.observe(seconds(stats.duration));
    alignment_.observe(seconds(stats.max_alignment_duration));
    sync_.observe(seconds(stats.max_sync_duration));
    last_completed_ = stats;
    return;
  }
  const auto reason = static_cast<std::size_t>(stats.outcome.reason);
  if (reason < aborted_.size()) ++aborted_[reason];
}

void job_metrics::start(std::optional<ss::checkpoint_id> resumed_from, std::chrono::nanoseconds restore_duration,
                        const std::function<void(std::uint16_t)>& listening) {
  resumed_from_ = resumed_from;
  started_at_ = from_.engine->at(0).now();
  started_ = true;
  status_.started(resumed_from, restore_duration, started_at_);
  const std::string at = server_->local_address().to_string();
  rt::log::info("job {}: status page on http://{}/, metrics on http://{}/metrics", from_.job, at, at);
  if (listening) listening(port());
  scope_.spawn(serve());
}

rt::task<void> job_metrics::serve() {
  // The busy ratios' first window starts now.
  const std::vector<executor_sample> first = co_await sample_executors(*from_.engine, from_.memory);
  busy_.resize(first.size());
  for (std::size_t e = 0; e < first.size(); ++e) busy_[e].start(first[e].now, seconds(first[e].counters.waited));
  status_.executors_started(first);
  co_await server_->run();
}

rt::task<void> job_metrics::stop() {
  co_await server_->stop();
  if (started_) co_await scope_.join();
}

rt::task<io::http_response> job_metrics::handle(job_metrics* self, io::http_request request) {
  if (request.method != "GET" && request.method != "HEAD") {
    io::http_response r = io::http_response::text(405, "method not allowed: GET or HEAD\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    co_return r;
  }
  if (status_api::serves(request.path)) co_return co_await self->status_.respond(std::move(request));
  if (request.path == "/" || request.path == "/index.html") {
    io::http_response page;
    page.content_type = "text/html; charset=utf-8";
    page.headers.emplace_back("Cache-Control", "no-store");
    page.body = status_page_html();
    co_return page;
  }
  if (request.path != "/metrics") {
    co_return io::http_response::text(
        404, "not found: the status page is at /, the metrics at /metrics, the JSON views at /api/job, /api/graph, "
             "/api/checkpoints, /api/checkpoints/latest and /api/checkpoints/<id>\n");
  }
  io::http_response r;
  r.body = co_await self->scrape();
  r.content_type = std::string(content_type);
  r.headers.emplace_back("Cache-Control", "no-store");
  co_return r;
}

rt::task<std::string> job_metrics::scrape() {
  const std::vector<task_sample> tasks = co_await sample_tasks(*from_.tasks);
  const std::vector<executor_sample> executors = co_await sample_executors(*from_.engine, from_.memory);
  std::optional<process_sample> process;
  auto read_process = [&process] { process = read_process_sample(); };
  co_await rt::offload(read_process);  // (files under /proc: blocking work, never on an executor)
  io::prometheus_text out;
  write_tasks(out, tasks);
  write_executors(out, executors);
  write_checkpoints(out);
  if (process) write_process(out, *process);
  co_return std::move(out).str();
}

void job_metrics::write_tasks(io::prometheus_text& out, const std::vector<task_sample>& tasks) const {
  const auto labels = [this](const task_sample& t) { return io::metric_labels{{job_label, from_.job}, {"task", t.name}}; };
  const auto each = [&](std::string_view name, metric_type type, std::string_view help, auto&& include, auto&& value) {
    out.family(name, type, help);
    for (const task_sample& t : tasks) {
      if (t.present && include(t)) out.sample(name, labels(t), value(t));
    }
  };
  const auto all = [](const task_sample&) { return true; };
  each("sluice_task_records_in_total", metric_type::counter,
       "Records the task took from its input channels (0 for a source).", all,
       [](const task_sample& t) { return t.records_in; });
  each("sluice_task_records_out_total", metric_type::counter,
       "Records the task passed on: to its output partition, or into a sink's output.", all,
       [](const task_sample& t) { return t.records_out; });
  each("sluice_task_bytes_in_total", metric_type::counter, "Bytes of the data buffers the task took from its input gate.",
       [](const task_sample& t) { return t.has_gate; }, [](const task_sample& t) { return t.bytes_in; });
  each("sluice_task_bytes_out_total", metric_type::counter,
       "Bytes of the data buffers the task handed to its output partition (tasks with one).",
       [](const task_sample& t) { return t.has_partition; }, [](const task_sample& t) { return t.bytes_out; });
  each("sluice_task_backpressured_seconds_total", metric_type::counter,
       "Seconds the task waited for a writable output partition.",
       [](const task_sample& t) { return t.has_partition; }, [](const task_sample& t) { return t.backpressured_s; });
  each("sluice_task_backpressured", metric_type::gauge, "1 while the task waits for a writable output partition.",
       [](const task_sample& t) { return t.has_partition; },
       [](const task_sample& t) { return std::uint64_t{t.backpressured_now ? 1u : 0u}; });
  each("sluice_task_idle_seconds_total", metric_type::counter,
       "Seconds the task waited for input (its next record, a quiet source); busy is the rest of the time "
       "not backpressured.",
       all, [](const task_sample& t) { return t.idle_s; });
  each("sluice_task_watermark_seconds", metric_type::gauge,
       "The task's current watermark (event time, seconds since the epoch), the smallest of its input channels'; "
       "absent before every channel sent one.",
       [](const task_sample& t) { return t.watermark.has_value(); },
       [](const task_sample& t) { return static_cast<double>(*t.watermark) / 1000.0; });
  each("sluice_task_credits_outstanding", metric_type::gauge,
       "Credits the task's input gate announced to its senders and they have not used yet.",
       [](const task_sample& t) { return t.has_gate; }, [](const task_sample& t) { return t.credits_outstanding; });
  out.family("sluice_task_buffers_in_use", metric_type::gauge,
             "Network buffers of the task's pools lent out (pool: output, priority (barriers), input).");
  for (const task_sample& t : tasks) {
    if (!t.present) continue;
    const auto pool = [&](const char* which, std::size_t n) {
      io::metric_labels l = labels(t);
      l.push_back({"pool", which});
      out.sample("sluice_task_buffers_in_use", l, std::uint64_t{n});
    };
    if (t.has_partition) {
      pool("output", t.output_in_use);
      pool("priority", t.priority_in_use);
    }
    if (t.has_gate) pool("input", t.input_in_use);
  }
}

void job_metrics::write_executors(io::prometheus_text& out, const std::vector<executor_sample>& executors) {
  const auto labels = [this](std::size_t e) {
    return io::metric_labels{{job_label, from_.job}, {"executor", std::to_string(e)}};
  };
  // The busy ratios: 1 - the idle seconds per second, over the window (job_samples.hpp).
  std::vector<double> ratios(executors.size(), 0);
  for (std::size_t e = 0; e < executors.size() && e < busy_.size(); ++e) {
    const double idle = busy_[e].update(executors[e].now, seconds(executors[e].counters.waited));
    ratios[e] = std::clamp(1.0 - idle, 0.0, 1.0);
  }
  out.family("sluice_executor_info", metric_type::gauge, "1 for each executor, with the I/O backend it runs on.");
  for (std::size_t e = 0; e < executors.size(); ++e) {
    io::metric_labels l = labels(e);
    l.push_back({"backend", executors[e].backend});
    out.sample("sluice_executor_info", l, std::uint64_t{1});
  }
  const auto each = [&](std::string_view name, metric_type type, std::string_view help, auto&& value) {
    out.family(name, type, help);
    for (std::size_t e = 0; e < executors.size(); ++e) out.sample(name, labels(e), value(e));
  };
  each("sluice_executor_busy_ratio", metric_type::gauge,
       "Share of wall time the executor was not blocked waiting in its I/O backend, over the last complete window "
       "of at least 1 s.",
       [&](std::size_t e) { return ratios[e]; });
  each("sluice_executor_idle_seconds_total", metric_type::counter,
       "Seconds the executor spent blocked waiting in its I/O backend.",
       [&](std::size_t e) { return seconds(executors[e].counters.waited); });
  each("sluice_executor_submissions_total", metric_type::counter,
       "Operations submitted to the executor's I/O backend (io_uring or epoll).",
       [&](std::size_t e) { return executors[e].counters.submitted; });
  each("sluice_executor_operations_in_flight", metric_type::gauge,
       "Operations submitted to the backend and not completed yet (the executor's own wake-up read included).",
       [&](std::size_t e) { return std::uint64_t{executors[e].in_flight}; });
  each("sluice_executor_inbox_depth", metric_type::gauge,
       "Messages posted to the executor from other threads and not run yet.",
       [&](std::size_t e) { return std::uint64_t{executors[e].inbox}; });
  each("sluice_executor_network_buffers", metric_type::gauge, "Network buffers (segments) of the executor's pool.",
       [&](std::size_t e) { return std::uint64_t{executors[e].segments_total}; });
  each("sluice_executor_network_buffers_in_use", metric_type::gauge,
       "Network buffers of the executor's pool held by its tasks' pools and channels.",
       [&](std::size_t e) { return std::uint64_t{executors[e].segments_total - executors[e].segments_free}; });
  each("sluice_executor_stalls_total", metric_type::counter,
       "Turns of the executor that ran longer than the stall threshold (SLUICE_STALL_MS, 100 ms by default; each "
       "is logged with what it ran): a blocking call or a long computation on the executor.",
       [&](std::size_t e) { return from_.engine->stalls(e); });
}

void job_metrics::write_checkpoints(io::prometheus_text& out) const {
  const io::metric_labels job{{job_label, from_.job}};
  out.family("sluice_checkpoints_completed_total", metric_type::counter, "Checkpoints completed by this run.");
  out.sample("sluice_checkpoints_completed_total", job, completed_);
  out.family("sluice_checkpoints_aborted_total", metric_type::counter, "Checkpoints aborted by this run, by reason.");
  for (std::size_t r = 0; r < abort_reasons; ++r) {
    io::metric_labels l = job;
    l.push_back({"reason", std::string(ss::to_string(static_cast<ss::abort_reason>(r)))});
    out.sample("sluice_checkpoints_aborted_total", l, aborted_[r]);
  }
  out.family("sluice_checkpoint_duration_seconds", metric_type::histogram,
             "Completed checkpoints: from the trigger to the completion.");
  out.histogram("sluice_checkpoint_duration_seconds", job, duration_);
  out.family("sluice_checkpoint_alignment_seconds", metric_type::histogram,
             "Completed checkpoints: the longest barrier alignment of any task.");
  out.histogram("sluice_checkpoint_alignment_seconds", job, alignment_);
  out.family("sluice_checkpoint_sync_seconds", metric_type::histogram,
             "Completed checkpoints: the longest synchronous part of any task's snapshot (its executor waited).");
  out.histogram("sluice_checkpoint_sync_seconds", job, sync_);
  out.family("sluice_checkpoint_last_state_bytes", metric_type::gauge,
             "The last completed checkpoint's state, by kind (operator state, in-flight channel state).");
  for (const char* kind : {"operator", "channel"}) {
    io::metric_labels l = job;
    l.push_back({"kind", kind});
    const std::uint64_t bytes = !last_completed_ ? 0
                                : std::string_view(kind) == "operator" ? last_completed_->operator_state_bytes
                                                                        : last_completed_->channel_state_bytes;
    out.sample("sluice_checkpoint_last_state_bytes", l, bytes);
  }
  out.family("sluice_checkpoint_last_completed_id", metric_type::gauge,
             "The id of the last checkpoint this run completed (0: none yet).");
  out.sample("sluice_checkpoint_last_completed_id", job, std::uint64_t{last_completed_ ? last_completed_->id : 0});
  std::optional<ss::coordinator::running_checkpoint> running;
  if (from_.coordinator != nullptr && from_.coordinator->has_value()) running = (*from_.coordinator)->oldest_in_flight();
  out.family("sluice_checkpoint_in_flight_age_seconds", metric_type::gauge,
             "How long ago the oldest checkpoint still in flight was triggered (0: none in flight).");
  const auto now = from_.engine->at(0).now();
  out.sample("sluice_checkpoint_in_flight_age_seconds", job,
             running ? seconds(now - running->triggered_at) : 0.0);
  out.family("sluice_job_resumed", metric_type::gauge,
             "1 if this run of the job resumed from a checkpoint (a restart), 0 if it started fresh.");
  out.sample("sluice_job_resumed", job, std::uint64_t{resumed_from_ ? 1u : 0u});
  out.family("sluice_job_resumed_from_checkpoint", metric_type::gauge,
             "The checkpoint this run resumed from (0: it started fresh).");
  out.sample("sluice_job_resumed_from_checkpoint", job, std::uint64_t{resumed_from_.value_or(0)});
  out.family("sluice_build_info", metric_type::gauge, "1, with the version of sluice the job runs on.");
  out.sample("sluice_build_info", {{job_label, from_.job}, {"version", std::string(rt::version())}}, std::uint64_t{1});
  out.family("sluice_job_uptime_seconds", metric_type::gauge, "Seconds since this run's tasks started.");
  out.sample("sluice_job_uptime_seconds", job, seconds(now - started_at_));
}

}  // namespace sluice::dataflow::detail
