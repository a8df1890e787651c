#pragma once
// job_samples: what a running job's HTTP endpoint (job_metrics: /metrics, and the status page's
// /api views, status_api.hpp) reads of its tasks and executors. Each task is sampled on its own
// executor and each executor on itself (run_on), so nothing executor-owned is read from another
// thread; the samples are plain values the endpoint then formats on its own executor.
//
// rate_meter turns a running total (records, idle or backpressured seconds) into a rate per
// second over the last complete window of at least `window`: the window's start moves only once it
// is that old, and until then the previous window's rate stands (the partial one before the first
// completes), so requests closer together than the window (two browsers, a scraper and a page, a
// page under a browser's virtual time) share it instead of dividing a few records by microseconds.

#include "task_slot.hpp"

#include <sluice/buffers/segment.hpp>
#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sluice::dataflow {
class job_builder;
class job_plan;
struct job_progress;
}  // namespace sluice::dataflow

namespace sluice::dataflow::detail {

// The job's checkpoint settings as the status page shows them (job_settings, job_runner.hpp).
struct checkpoint_settings_view {
  std::string dir;
  std::string mode;  // snapshot::to_string(checkpoint_mode)
  std::chrono::milliseconds interval{0};
  std::chrono::milliseconds min_pause{0};
  std::chrono::milliseconds timeout{0};
  std::chrono::milliseconds alignment_timeout{0};  // aligned_timeout only
  std::optional<unsigned> tolerable_failures;       // empty: no limit
  std::size_t retained = 0;
  std::size_t history_entries = 0;  // 0: no history file
};

// What a job's endpoint reads, given by the runner; everything must outlive the endpoint's stop().
struct endpoint_sources {
  std::string job;
  const std::vector<task_slot*>* tasks = nullptr;  // this worker's
  runtime::engine* engine = nullptr;
  buffers::network_memory* memory = nullptr;
  const std::optional<snapshot::coordinator>* coordinator = nullptr;
  // For the status page (status_api.hpp); may be null/empty in tests of /metrics alone.
  const job_builder* builder = nullptr;
  const job_plan* plan = nullptr;
  unsigned worker = 0;  // this worker's index (0 unless the job runs across workers)
  checkpoint_settings_view checkpoints;
  bool keeps_history = false;  // this side writes the checkpoint history (job_history.hpp)
  std::function<const char*()> state;                    // "running", "draining", "stopping"
  std::function<runtime::task<job_progress>()> progress;  // the runner's, on executor 0
};

struct task_sample {
  bool present = false;  // the task exists (made, not destroyed yet)
  snapshot::task_id id = 0;
  std::size_t stage = 0;
  std::size_t subtask = 0;
  std::size_t executor = 0;
  std::string name;
  std::chrono::steady_clock::time_point now{};
  bool source = false;
  bool has_partition = false;
  bool has_gate = false;
  std::uint64_t records_in = 0;
  std::uint64_t records_out = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  double backpressured_s = 0;
  bool backpressured_now = false;
  double idle_s = 0;  // waiting for input (task_meters.hpp)
  std::optional<std::uint64_t> watermark;
  std::size_t output_in_use = 0;
  std::size_t priority_in_use = 0;
  std::size_t input_in_use = 0;
  std::uint64_t credits_outstanding = 0;
};

struct executor_sample {
  std::chrono::steady_clock::time_point now{};
  runtime::backend_counters counters{};
  std::string backend;
  std::size_t in_flight = 0;
  std::size_t inbox = 0;
  std::size_t segments_total = 0;
  std::size_t segments_free = 0;
};

// Every task of `tasks`, in that order, each on its executor.
runtime::task<std::vector<task_sample>> sample_tasks(const std::vector<task_slot*>& tasks);
// Every executor of `eng`, in order, each on itself; `memory` (may be null): its network buffers.
runtime::task<std::vector<executor_sample>> sample_executors(runtime::engine& eng, buffers::network_memory* memory);

double seconds(std::chrono::nanoseconds d) noexcept;

class rate_meter {
 public:
  static constexpr std::chrono::seconds window{1};
  // Starts the first window at `at`, when the total was `total` (else the first update starts it).
  void start(std::chrono::steady_clock::time_point at, double total) noexcept;
  // The total's increase per second over the last complete window (0 on the first call, which
  // starts the first window unless start() did).
  double update(std::chrono::steady_clock::time_point now, double total) noexcept;

 private:
  bool started_ = false;
  std::chrono::steady_clock::time_point at_{};
  double base_ = 0;
  double rate_ = 0;
  bool full_ = false;  // a window completed: rate_ is its rate
};

}  // namespace sluice::dataflow::detail
