#pragma once
// Running one seed of `sluice simulate`: a fault-free reference run, then the faulty run, its
// crashes and restarts, each crash ending a process (fork) as kill -9 would, and the oracles.

#include "sim_scenario.hpp"

#include <cstdint>
#include <string>

namespace sluice::apps::simulate {

struct seed_options {
  bool trace = false;        // print every scheduling and fault decision (stderr)
  bool twice = false;        // run the seed again and require the same trace
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
};

seed_result run_seed(const scenario& s, const seed_options& options);

}  // namespace sluice::apps::simulate
