#pragma once
// status_api: the JSON behind the status page (status_page.hpp), served by the job's endpoint
// (job_metrics.hpp) next to /metrics. Every view is computed per request on executor 0 from fresh
// samples (job_samples.hpp) and, for the checkpoints, from the checkpoint directory's history file
// (checkpoint_history.hpp), read through the runtime's file I/O, so it shows the runs before this
// one too. The views:
//   GET /api/job                  the job: name, version, state, uptime, what it resumed from and how
//                                 long the restore took, backend and executors, progress, the
//                                 checkpoint settings, checkpoints of this run (completed, aborted,
//                                 in flight and its age)
//   GET /api/graph                stages (parallelism, upstreams), tasks (where they run, records and
//                                 bytes in and out, rates per second, shares of time busy, idle and
//                                 backpressured (task_meters.hpp), whether it is the bottleneck,
//                                 watermark, buffers, credits) and executors (busy ratio: the share
//                                 of time the executor's thread was not blocked in its I/O backend,
//                                 ...)
//   GET /api/checkpoints          the history: summary counts, the newest ?recent=N checkpoints
//                                 (default 200, at most 5000) with trigger time, duration,
//                                 alignment, state sizes, outcome and reason, and the starts
//                                 (restores with their durations)
//   GET /api/checkpoints/latest   the newest completed checkpoint of the history with its per-task
//                                 breakdown (start delay, alignment, write, fsync, sizes, switch);
//                                 null if there is none
//   GET /api/checkpoints/<id>     that checkpoint of the history (the newest record of that id), with
//                                 its per-task breakdown; 404 if the history has none of that id, 400
//                                 for an id that is not a number (both with {"error": "..."})
// Rates and time shares are over a window of at least a second (rate_meter), shared by every
// client. A task is the bottleneck when it is busy at least half the time (and more busy than
// backpressured) while a task of a stage feeding it is backpressured at least half the time.
// Numbers are JSON numbers: durations in milliseconds, sizes in bytes, times as Unix milliseconds.

#include "job_samples.hpp"

#include <sluice/io/http_server.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::dataflow {
struct job_settings;
}  // namespace sluice::dataflow

namespace sluice::dataflow::detail {

checkpoint_settings_view checkpoint_settings_of(const job_settings& settings);

class status_api {
 public:
  explicit status_api(const endpoint_sources& from) : from_(from) {}

  // Once the tasks run (on executor 0).
  void started(std::optional<snapshot::checkpoint_id> resumed_from, std::chrono::nanoseconds restore_duration,
               std::chrono::steady_clock::time_point at);
  void checkpoint_ended(const snapshot::checkpoint_stats& stats);
  // The executors as the tasks started: the busy ratios' first window.
  void executors_started(const std::vector<executor_sample>& executors);

  // Whether `path` is one of the views above.
  static bool serves(std::string_view path) noexcept;
  // The view's response to a GET or HEAD (404 for another path); on executor 0.
  runtime::task<io::http_response> respond(io::http_request request);

 private:
  runtime::task<std::string> job_view();
  runtime::task<std::string> graph_view();
  runtime::task<std::string> checkpoints_view(std::size_t recent);
  runtime::task<std::string> latest_view();
  runtime::task<io::http_response> checkpoint_view(std::string id);
  void add_task_figures(nlohmann::json& t, const task_sample& s);

  const endpoint_sources& from_;
  bool started_ = false;
  std::optional<snapshot::checkpoint_id> resumed_from_;
  std::chrono::nanoseconds restore_duration_{0};
  std::chrono::steady_clock::time_point started_at_{};
  std::uint64_t completed_ = 0;
  std::uint64_t aborted_ = 0;
  std::optional<snapshot::checkpoint_id> last_completed_;
  struct task_rates {
    rate_meter in, out, backpressured, idle;
  };
  std::map<snapshot::task_id, task_rates> rates_;
  std::vector<rate_meter> idle_;  // per executor
};

}  // namespace sluice::dataflow::detail
