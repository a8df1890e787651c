#pragma once
// Running one seed of `sluice simulate`: a fault-free reference run, then the faulty run, its
// crashes and restarts, each crash ending a process (fork) as kill -9 would, and the oracles.

#include "sim_scenario.hpp"
#include "sim_watchdog.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::apps::simulate {

struct seed_options {
  bool trace = false;        // print every scheduling and fault decision (stderr)
  bool twice = false;        // run the seed again and require the same trace
  // Every simulated process's budgets (sim::world_options; 0: none): steps in all, and steps in a
  // row in which nothing completes and time does not jump. Past either, the process is hung.
  std::uint64_t step_limit = default_step_limit;
  std::uint64_t idle_step_limit = default_idle_step_limit;
  // A process that used this much CPU time (or 30 times as much real time) without beginning a step
  // is stuck inside one (sim_watchdog.hpp).
  std::chrono::milliseconds spin_limit = default_spin_limit;
};

struct seed_result {
  scenario s;
  bool failed = false;
  std::string failure;       // what went wrong, in a few lines
  std::uint64_t steps = 0;   // scheduler steps over every process of the seed
  double simulated_seconds = 0;
  std::uint64_t trace_hash = 0;
  unsigned crashes = 0;      // crashes that happened
  unsigned restores = 0;     // restore points run: a process started from a crash image taken as a
                             // checkpoint completed, while the job went on
  unsigned attempts = 0;     // run_job calls (restarts after a failure count)
  std::uint64_t faults = 0;  // faults injected
  std::uint64_t output_lines = 0;
  std::uint64_t max_process_steps = 0;  // the most steps one simulated process took (the reference too)
  std::uint64_t longest_idle_run = 0;   // the most steps in a row without progress, in any process
  unsigned stops = 0;                   // stop requests sent (scenario::stop)
  unsigned stopped = 0;                 // job runs a stop ended (and the next one resumed)
  unsigned drains = 0;                  // of those, the ones a drain ended (exit 0, job_result::stopped_at)
};

seed_result run_seed(const scenario& s, const seed_options& options);

}  // namespace sluice::apps::simulate
