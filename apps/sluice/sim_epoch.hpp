#pragma once
// One simulated process of a seed (sim_seed.hpp): what the parent plans for it (epoch_plan), its
// body (run_epoch, in a forked child), and what it reports back through a pipe (epoch_report).

#include "sim_scenario.hpp"

#include <sluice/sim/disk_image.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::apps::simulate {

struct epoch_report {
  enum status : std::uint64_t { finished = 0, crashed = 1, failed = 2 } st = failed;
  std::string message;
  sim::disk_image image;  // crashed: the durable image
  std::vector<std::string> output;
  std::uint64_t steps = 0;
  std::uint64_t nanoseconds = 0;
  std::uint64_t hash = 0;
  std::uint64_t attempts = 0;
  std::uint64_t faults = 0;
  std::uint64_t newest_completed = 0;
  std::uint64_t longest_idle = 0;  // the world's longest run of steps without progress
  std::uint64_t stops_sent = 0;    // stop requests this process sent (a drain_now sends 2)
  std::uint64_t stopped = 0;       // runs that a stop ended (exit 130, or a drain's 0 with stopped_at)
  std::uint64_t drains = 0;        // of those, the ones a drain ended with job_result::stopped_at
  // Crash images taken just after a checkpoint completed, while the process went on: each must
  // restore to the reference output (epoch_plan::restore_after_checkpoint).
  struct restore_point {
    std::uint64_t checkpoint = 0;
    sim::disk_image image;
  };
  std::vector<restore_point> restore_points;

  std::string encode() const;
  static std::optional<epoch_report> decode(std::string_view in);
};

struct epoch_plan {
  std::uint64_t world_seed = 0;
  bool reference = false;
  std::uint64_t crash_at_step = 0;
  // Or (when not 0) crash this many steps after the process saw its crash_after_checkpoint-th
  // checkpoint complete: where a completed checkpoint that is not yet durable, or does not
  // restore, shows.
  std::uint64_t crash_after_checkpoint = 0;
  std::uint64_t crash_delay_steps = 0;
  // When not 0: just after the process saw its restore_after_checkpoint-th checkpoint complete, take
  // a crash image (with a random source of its own) and go on; the parent then starts a process
  // from it. What a crash there would have left, without ending this process.
  std::uint64_t restore_after_checkpoint = 0;
  std::chrono::nanoseconds faults_for{0};
  std::uint64_t must_resume_from = 0;  // the newest checkpoint that completed before the last crash
  // The stop to send at step stop_at_step (scenario::stop); drain_now's stop now comes
  // second_stop_steps after its drain.
  stop_kind stop = stop_kind::none;
  std::uint64_t stop_at_step = 0;
  std::uint64_t second_stop_steps = 0;
  // The world's budgets (world_options::step_limit, idle_step_limit; 0: none), and a step to stop
  // at and describe what everything waits for (world_options::describe_at_step).
  std::uint64_t step_limit = 0;
  std::uint64_t idle_step_limit = 0;
  std::uint64_t describe_at_step = 0;
  // The parent's watchdog (sim_watchdog.hpp, watch_limits::for_spin): the process is hung once it used
  // this much CPU time without beginning a step.
  std::chrono::milliseconds spin_limit{0};
  bool trace = false;
};

// In the child: runs the process's job attempts on a world made from `image`, writes its report to
// `report_fd` and ends the process. The world publishes its step count in `steps` (sim_watchdog.hpp).
[[noreturn]] void run_epoch(const scenario& s, const sim::disk_image& image, const epoch_plan& plan, int report_fd,
                            std::atomic<std::uint64_t>* steps);

}  // namespace sluice::apps::simulate
