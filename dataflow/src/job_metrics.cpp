// See job_metrics.hpp.

#include "job_metrics.hpp"

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/version.hpp>

#include <fmt/core.h>

#include <algorithm>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace ss = sluice::snapshot;
using io::metric_type;

namespace {

constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::size_t abort_reasons = 8;  // ss::abort_reason's values
// A busy ratio is measured over at least this long (shorter scrape intervals share the window).
constexpr std::chrono::seconds busy_window{1};

double seconds(std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e9; }

// Checkpoint durations and alignments: 1 ms to 10 min.
std::vector<double> checkpoint_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
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

struct job_metrics::task_sample {
  std::string name;
  bool present = false;
  bool source = false;
  bool has_partition = false;
  bool has_gate = false;
  std::uint64_t records_in = 0;
  std::uint64_t records_out = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  double backpressured_s = 0;
  bool backpressured_now = false;
  std::optional<std::uint64_t> watermark;
  std::size_t output_in_use = 0;
  std::size_t priority_in_use = 0;
  std::size_t input_in_use = 0;
  std::uint64_t credits_outstanding = 0;
};

struct job_metrics::executor_sample {
  std::chrono::steady_clock::time_point now{};
  rt::backend_counters counters{};
  std::string backend;
  std::size_t in_flight = 0;
  std::size_t inbox = 0;
  std::size_t segments_total = 0;
  std::size_t segments_free = 0;
};

job_metrics::job_metrics(std::unique_ptr<io::http_server> server, sources from)
    : server_(std::move(server)), from_(std::move(from)), duration_(checkpoint_buckets()),
      alignment_(checkpoint_buckets()) {}

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
  if (stats.outcome.completed()) {
    ++completed_;
    duration_.observe(seconds(stats.duration));
    alignment_.observe(seconds(stats.max_alignment_duration));
    last_completed_ = stats;
    return;
  }
  const auto reason = static_cast<std::size_t>(stats.outcome.reason);
  if (reason < aborted_.size()) ++aborted_[reason];
}

void job_metrics::start(std::optional<ss::checkpoint_id> resumed_from,
                        const std::function<void(std::uint16_t)>& listening) {
  resumed_from_ = resumed_from;
  started_at_ = from_.engine->at(0).now();
  started_ = true;
  rt::log::info("job {}: metrics on http://{}/metrics", from_.job, server_->local_address().to_string());
  if (listening) listening(port());
  scope_.spawn(serve());
}

rt::task<void> job_metrics::serve() {
  // The busy ratios' first window starts now.
  std::vector<executor_sample> first(from_.engine->size());
  for (std::size_t e = 0; e < first.size(); ++e) {
    co_await rt::run_on(&from_.engine->at(e), sample_executor(&from_.engine->at(e), from_.memory, e, &first[e]));
  }
  busy_.resize(first.size());
  for (std::size_t e = 0; e < first.size(); ++e) busy_[e] = {first[e].now, first[e].counters.waited, 0};
  co_await server_->run();
}

rt::task<void> job_metrics::stop() {
  co_await server_->stop();
  if (started_) co_await scope_.join();
}

rt::task<io::http_response> job_metrics::handle(job_metrics* self, io::http_request request) {
  if (request.path != "/metrics") {
    co_return io::http_response::text(404, "not found: the metrics are at /metrics\n");
  }
  if (request.method != "GET" && request.method != "HEAD") {
    io::http_response r = io::http_response::text(405, "method not allowed: GET or HEAD\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    co_return r;
  }
  io::http_response r;
  r.body = co_await self->scrape();
  r.content_type = std::string(content_type);
  r.headers.emplace_back("Cache-Control", "no-store");
  co_return r;
}

rt::task<void> job_metrics::sample_task(const task_slot* slot, task_sample* out) {
  const stream_task* t = slot->task.get();
  if (t == nullptr) co_return;
  out->present = true;
  out->name = t->name();
  out->source = t->is_source();
  out->records_in = t->records_in();
  out->records_out = t->records_out();
  out->bytes_in = t->meters().bytes_in;
  const auto now = slot->executor->now();
  out->backpressured_s = seconds(t->meters().backpressure.total(now));
  out->backpressured_now = t->meters().backpressure.waiting();
  out->watermark = t->watermark();
  if (slot->partition) {
    out->has_partition = true;
    out->bytes_out = slot->partition->data_bytes();
  }
  if (slot->out_pool) out->output_in_use = slot->out_pool->in_use();
  if (slot->priority_pool) out->priority_in_use = slot->priority_pool->in_use();
  if (slot->in_pool) out->input_in_use = slot->in_pool->in_use();
  if (slot->gate) {
    out->has_gate = true;
    for (std::uint32_t c = 0; c < slot->gate->channels(); ++c) out->credits_outstanding += slot->gate->announced_unused(c);
  }
}

rt::task<void> job_metrics::sample_executor(rt::executor* ex, buffers::network_memory* memory, std::size_t index,
                                            executor_sample* out) {
  out->now = ex->now();
  out->counters = ex->backend().counters();
  out->backend = ex->backend().name();
  out->in_flight = ex->backend().outstanding();
  out->inbox = ex->inbox_depth();
  if (memory != nullptr && index < memory->executors()) {
    out->segments_total = memory->pool(index).total_segments();
    out->segments_free = memory->pool(index).free_segments();
  }
  co_return;
}

rt::task<std::string> job_metrics::scrape() {
  std::vector<task_sample> tasks(from_.tasks->size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const task_slot* slot = (*from_.tasks)[i];
    co_await rt::run_on(slot->executor, sample_task(slot, &tasks[i]));
  }
  std::vector<executor_sample> executors(from_.engine->size());
  for (std::size_t e = 0; e < executors.size(); ++e) {
    rt::executor* ex = &from_.engine->at(e);
    co_await rt::run_on(ex, sample_executor(ex, from_.memory, e, &executors[e]));
  }
  io::prometheus_text out;
  write_tasks(out, tasks);
  write_executors(out, executors);
  write_checkpoints(out);
  co_return std::move(out).str();
}

void job_metrics::write_tasks(io::prometheus_text& out, const std::vector<task_sample>& tasks) const {
  const auto labels = [this](const task_sample& t) { return io::metric_labels{{"job", from_.job}, {"task", t.name}}; };
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
  each("sluice_task_watermark", metric_type::gauge,
       "The task's current watermark (event time), the smallest of its input channels'; absent before every channel "
       "sent one.",
       [](const task_sample& t) { return t.watermark.has_value(); }, [](const task_sample& t) { return *t.watermark; });
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
    return io::metric_labels{{"job", from_.job}, {"executor", std::to_string(e)}};
  };
  // The busy ratios: over the window since each executor's baseline, which moves once it is old enough.
  std::vector<double> ratios(executors.size(), 0);
  for (std::size_t e = 0; e < executors.size() && e < busy_.size(); ++e) {
    const auto wall = executors[e].now - busy_[e].at;
    const auto idle = executors[e].counters.waited - busy_[e].idle;
    if (wall > std::chrono::nanoseconds(0)) {
      ratios[e] = std::clamp(1.0 - static_cast<double>(idle.count()) / static_cast<double>(wall.count()), 0.0, 1.0);
    }
    if (wall >= busy_window) busy_[e] = {executors[e].now, executors[e].counters.waited, ratios[e]};
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
       "Share of wall time the executor was not blocked waiting in its I/O backend, over the last window (at least "
       "1 s, since the previous scrape).",
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
}

void job_metrics::write_checkpoints(io::prometheus_text& out) const {
  const io::metric_labels job{{"job", from_.job}};
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
  out.sample("sluice_build_info", {{"job", from_.job}, {"version", std::string(rt::version())}}, std::uint64_t{1});
  out.family("sluice_job_uptime_seconds", metric_type::gauge, "Seconds since this run's tasks started.");
  out.sample("sluice_job_uptime_seconds", job, seconds(now - started_at_));
}

}  // namespace sluice::dataflow::detail
