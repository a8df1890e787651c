// checkpoint: checkpoint duration under full backpressure, per mode (Flink's
// CheckpointingTimeBenchmark shape).
//
// The job: a generator (parallelism 2, 1 KiB records, as fast as it is let) -> key exchange -> map
// (parallelism 2) -> key exchange -> a slow sink (parallelism 2, --sink-us per record, 1 ms by
// default). The sink sets the pace, so every buffer between the stages fills and stays full: an
// aligned barrier waits behind all of them, an unaligned one overtakes them and stores them.
//
// Each mode runs the job with periodic checkpoints (every --interval-ms) and measures every
// checkpoint that completes after --warmup-ms, from trigger to manifest durable, until --checkpoints
// of them or --seconds. Then the same job without backpressure (no sink delay, the generator
// limited to --unloaded-rate records/s) with unaligned checkpoints gives the unloaded baseline.
// Reported per mode: median_ms, p95_ms, channel_state_bytes (median), and where the time went
// (medians over every task of every checkpoint: start delay, snapshot to state file written, its
// fsync; and the commit's tail after the slowest task); and unloaded_median_ms, and
// aligned/unaligned as the ratio.

#include "bench.hpp"

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

namespace sluice::bench {
namespace {

namespace df = sluice::dataflow;
namespace ss = sluice::snapshot;
using record = std::pair<std::uint64_t, std::string>;

struct mode_figures {
  std::vector<double> durations_ms;
  std::vector<double> channel_state_bytes;
  std::uint64_t aborted = 0;
  // Per task and checkpoint (task_checkpoint_breakdown), and per checkpoint the commit's tail.
  std::vector<double> start_ms;
  std::vector<double> write_ms;
  std::vector<double> fsync_ms;
  std::vector<double> commit_tail_ms;
};

double ms(std::chrono::nanoseconds d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct run_settings {
  std::string dir;
  ss::checkpoint_mode mode = ss::checkpoint_mode::unaligned;
  std::chrono::milliseconds alignment_timeout{10};
  std::chrono::microseconds sink_delay{1000};
  double source_rate = 0;  // records/s, 0: unlimited
  std::chrono::milliseconds interval{100};
  std::chrono::milliseconds warmup{1000};
  std::uint64_t checkpoints = 20;
  double seconds = 30;
  std::uint64_t record_bytes = 1024;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

mode_figures run_pipeline(const run_settings& s) {
  std::filesystem::remove_all(s.dir + "/out");
  std::filesystem::remove_all(s.dir + "/chk");
  std::filesystem::create_directories(s.dir + "/out");
  const std::uint64_t bytes = s.record_bytes;
  df::job_builder job("checkpoint-bench");
  const auto key = [](const record& r) { return r.first; };
  job.generate<record>("source", 2, 0, [bytes](std::uint64_t n) { return record(n, std::string(bytes, 'a')); },
                       s.source_rate)
      .key_by<std::uint64_t>(key)
      .partition("map", 2)
      .map<record>([](const record& r) {
        record out = r;
        out.second[0] = 'b';
        return out;
      })
      .key_by<std::uint64_t>(key)
      .partition("sink", 2)
      .write_lines(s.dir + "/out", [](const record& r) { return std::to_string(r.first); },
                   df::sink_options{s.sink_delay});

  mode_figures figures;
  std::stop_source stop;
  const auto started = std::chrono::steady_clock::now();
  df::job_settings settings;
  settings.checkpoint_dir = s.dir + "/chk";
  settings.checkpoint_interval = s.interval;
  settings.mode = s.mode;
  settings.alignment_timeout = s.alignment_timeout;
  settings.retained_checkpoints = 2;
  settings.handle_signals = false;
  settings.stop = stop.get_token();
  // Both callbacks run on the job's first executor, one at a time; `figures` is read after run_job.
  settings.on_checkpoint = [&](const ss::checkpoint_stats& c) {
    if (c.triggered_at < started + s.warmup) return;
    if (!c.outcome.completed()) {
      ++figures.aborted;
      return;
    }
    figures.durations_ms.push_back(std::chrono::duration<double, std::milli>(c.duration).count());
    // Where the time went: each task's start delay, snapshot to file written, and fsync; and the
    // commit after the task that finished last (its fsync to the manifest durable).
    double slowest = 0;
    for (const ss::task_checkpoint_breakdown& t : c.task_breakdown) {
      const double start = t.start_delay ? ms(*t.start_delay) : 0;
      figures.start_ms.push_back(start);
      figures.write_ms.push_back(ms(t.write_duration));
      figures.fsync_ms.push_back(ms(t.fsync_duration));
      slowest = std::max(slowest, start + ms(t.write_duration) + ms(t.fsync_duration));
    }
    if (!c.task_breakdown.empty()) figures.commit_tail_ms.push_back(std::max(0.0, ms(c.duration) - slowest));
    figures.channel_state_bytes.push_back(static_cast<double>(c.channel_state_bytes));
    if (figures.durations_ms.size() >= s.checkpoints) stop.request_stop();
  };
  settings.on_progress = [&](const df::job_progress& p) {
    if (std::chrono::duration<double>(p.elapsed).count() >= s.seconds) stop.request_stop();
  };
  df::job_result r = df::run_job(job, settings);
  if (r.exit_code != 0 && r.exit_code != 130) throw std::runtime_error("checkpoint bench: the job failed: " + r.message);
  if (r.exit_code == 0) throw std::runtime_error("checkpoint bench: the unbounded job ended by itself");
  return figures;
}

class checkpoint_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "checkpoint"; }
  std::string_view description() const noexcept override {
    return "checkpoint duration under full backpressure (slow sink), aligned vs unaligned vs aligned-timeout, "
           "and unloaded";
  }
  bool plots() const noexcept override { return true; }
  std::vector<option> options() override {
    return {{"--checkpoints", "checkpoints measured per mode", &checkpoints_},
            {"--seconds", "at most this long per mode", &seconds_},
            {"--sink-us", "the sink's time per record", &sink_us_},
            {"--interval-ms", "checkpoint interval", &interval_ms_},
            {"--alignment-timeout-ms", "aligned-timeout's alignment timeout", &alignment_timeout_ms_},
            {"--record-bytes", "payload bytes per record", &record_bytes_},
            {"--unloaded-rate", "records/s of the unloaded run", &unloaded_rate_}};
  }
  void run(const common_options&, const reporter& out) override {
    const std::string dir = fmt::format("/tmp/sluice-bench-checkpoint-{}", ::getpid());
    std::filesystem::create_directories(dir);
    run_settings base;
    base.dir = dir;
    base.sink_delay = std::chrono::microseconds(sink_us_);
    base.interval = std::chrono::milliseconds(interval_ms_);
    base.alignment_timeout = std::chrono::milliseconds(alignment_timeout_ms_);
    base.checkpoints = checkpoints_;
    base.seconds = seconds_;
    base.record_bytes = record_bytes_;

    const std::pair<const char*, ss::checkpoint_mode> modes[] = {{"unaligned", ss::checkpoint_mode::unaligned},
                                                                 {"aligned_timeout", ss::checkpoint_mode::aligned_timeout},
                                                                 {"aligned", ss::checkpoint_mode::aligned}};
    chart* c = out.chart();
    if (c != nullptr) {
      c->describe(fmt::format("checkpoint duration, trigger to durable manifest ({} KiB records, sink {} us/record, "
                              "every {} ms)",
                              static_cast<double>(record_bytes_) / 1024.0, sink_us_, interval_ms_),
                  "milliseconds", chart_style::distribution, "checkpoints");
    }
    double unaligned_median = 0;
    double aligned_median = 0;
    for (const auto& [mode_name, mode] : modes) {
      run_settings s = base;
      s.mode = mode;
      const mode_figures f = run_pipeline(s);
      const double med = percentile(f.durations_ms, 0.5);
      const double p95 = percentile(f.durations_ms, 0.95);
      const double state = percentile(f.channel_state_bytes, 0.5);
      if (c != nullptr) c->add(mode_name, "under backpressure", f.durations_ms);
      if (mode == ss::checkpoint_mode::unaligned) unaligned_median = med;
      if (mode == ss::checkpoint_mode::aligned) aligned_median = med;
      const double start = percentile(f.start_ms, 0.5);
      const double write = percentile(f.write_ms, 0.5);
      const double fsync = percentile(f.fsync_ms, 0.5);
      const double tail = percentile(f.commit_tail_ms, 0.5);
      out.result(name(),
                 fmt::format("{:<16} under backpressure: median {:.1f} ms  p95 {:.1f} ms  channel state {} (median)  "
                             "({} checkpoints, {} aborted)\n{:<16} per task (medians): start {:.2f} ms, snapshot to "
                             "file written {:.2f} ms, fsync {:.2f} ms; commit after the last task's fsync {:.2f} ms",
                             mode_name, med, p95, human_bytes(state), f.durations_ms.size(), f.aborted, "", start,
                             write, fsync, tail),
                 {{"mode", std::string(mode_name)},
                  {"median_ms", med},
                  {"p95_ms", p95},
                  {"channel_state_bytes", state},
                  {"checkpoints", std::uint64_t{f.durations_ms.size()}},
                  {"aborted", f.aborted},
                  {"task_start_ms", start},
                  {"task_write_ms", write},
                  {"task_fsync_ms", fsync},
                  {"commit_tail_ms", tail}});
    }
    run_settings unloaded = base;
    unloaded.mode = ss::checkpoint_mode::unaligned;
    unloaded.sink_delay = std::chrono::microseconds(0);
    unloaded.source_rate = static_cast<double>(unloaded_rate_);
    const mode_figures u = run_pipeline(unloaded);
    if (c != nullptr) c->add("unaligned, unloaded", "unloaded", u.durations_ms);
    const double unloaded_median = percentile(u.durations_ms, 0.5);
    const double ratio = unaligned_median > 0 ? aligned_median / unaligned_median : 0;
    out.result(name(),
               fmt::format("unloaded (unaligned, {} records/s, no sink delay): median {:.1f} ms  |  aligned / unaligned "
                           "under backpressure: {:.1f}x  (targets: unaligned <= 3 ms, aligned-timeout <= 8 ms)",
                           unloaded_rate_, unloaded_median, ratio),
               {{"unloaded_median_ms", unloaded_median},
                {"aligned_over_unaligned", ratio},
                {"sink_us", sink_us_},
                {"record_bytes", record_bytes_},
                {"interval_ms", interval_ms_}});
    std::filesystem::remove_all(dir);
  }

 private:
  std::uint64_t checkpoints_ = 20;
  double seconds_ = 30;
  std::uint64_t sink_us_ = 1000;
  std::uint64_t interval_ms_ = 100;
  std::uint64_t alignment_timeout_ms_ = 10;
  std::uint64_t record_bytes_ = 1024;
  std::uint64_t unloaded_rate_ = 2000;
};

registration<checkpoint_bench> reg;

}  // namespace
}  // namespace sluice::bench
