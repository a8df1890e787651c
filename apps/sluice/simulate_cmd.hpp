#pragma once
// `sluice simulate`: runs whole jobs on the deterministic simulator, seed after seed, and prints one
// line per failure with the command that reproduces it, then a summary (docs/simulation.md).

#include "sim_watchdog.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace sluice::apps {

struct simulate_options {
  std::string job;
  std::string seeds;  // "A-B" or "A"
  std::string faults = "all";
  std::string plant;
  bool json = false;
  bool trace = false;
  bool list_plants = false;
  bool first_failure = false;      // stop after the first seed that fails
  std::uint64_t ring = 0;          // every executor's ring size, for every seed (0: each seed draws)
  std::uint64_t twice_every = 10;  // every N-th seed runs twice, to check determinism (0: never)
  std::uint64_t soak_minutes = 0;  // keep going past the last seed until this much time passed
  std::string stop;                // every seed sends this stop (drain, now, drain-now, none); "": each draws
  // Each simulated process's budgets (seed_options): more steps than this, or this many in a row
  // without progress, is a hang.
  std::uint64_t max_steps = simulate::default_step_limit;
  std::uint64_t max_idle_steps = simulate::default_idle_step_limit;
  // A process that uses this much CPU (or 30 times as much real time) without beginning a step is hung.
  double spin_limit_seconds = std::chrono::duration<double>(simulate::default_spin_limit).count();
};

void add_simulate_options(CLI::App& command, simulate_options& options);
// 0: no seed failed (with --plant: the planted bug was found); 1: a seed failed (the bug escaped);
// 2: bad usage.
int run_simulate(const simulate_options& options);

}  // namespace sluice::apps
