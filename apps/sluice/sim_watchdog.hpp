#pragma once
// The watchdog over a simulated process (sim_seed.cpp): the world's step budgets end a seed that
// goes on step after step, but not one that spins inside a single step (a loop that never returns
// to the scheduler) or blocks in it (a real blocking call), which no step count sees. The child
// publishes its step count in shared memory (world_options::published_steps); the parent reads the
// child's report while it watches that count, and kills the child once no step has begun while the
// child used `cpu` of CPU time (a spin: counted in CPU time, so a loaded machine that leaves the child
// waiting for a CPU is not taken for one), or for `wall` of real time (blocked).
//
//   shared_steps steps;                      // before fork: the child's world stores into it
//   watched_read r = read_watching(fd, pid, steps.count(), watch_limits::for_spin(10s));
//   if (r.stuck) ... r.stuck_at_step ...     // the child is dead (SIGKILL) and reaped by the caller

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::apps::simulate {

// A step count in memory shared with the children forked after it is made.
class shared_steps {
 public:
  shared_steps();
  ~shared_steps();
  shared_steps(const shared_steps&) = delete;
  shared_steps& operator=(const shared_steps&) = delete;
  std::atomic<std::uint64_t>& count() noexcept { return *count_; }

 private:
  std::atomic<std::uint64_t>* count_ = nullptr;
};

struct watch_limits {
  std::chrono::milliseconds cpu;   // CPU time the child may use without beginning a step
  std::chrono::milliseconds wall;  // real time it may take without beginning a step
  static watch_limits for_spin(std::chrono::milliseconds cpu) noexcept { return {cpu, cpu * 30}; }
};

struct watched_read {
  enum stuck_kind { no, spinning, blocked };
  std::string bytes;                // what the child wrote before it closed the pipe (or was killed)
  stuck_kind stuck = no;            // killed: no step began within a limit
  std::uint64_t stuck_at_step = 0;  // the step it was in
};

// Reads `fd` to its end. Meanwhile, if `steps` stays the same past a limit, kills `child` (SIGKILL)
// and returns what was read, stuck. The caller reaps the child either way.
watched_read read_watching(int fd, pid_t child, const std::atomic<std::uint64_t>& steps, watch_limits limits);
// The CPU time `pid` has used (/proc/<pid>/stat), 0 if it cannot be read.
std::chrono::milliseconds cpu_time_of(pid_t pid);

// The budgets of every simulated process (docs/simulation.md, "Budgets"; sluice simulate --max-steps,
// --max-idle-steps, --spin-limit-seconds). Measured over CI's seeds (scripts/simulate.sh, 2,156 seeds
// with stops): a process took at most 6,490 steps, and at most 1,581 in a row without progress
// (sim::world_options::idle_step_limit); the budgets are about 150 and 60 times that. A step takes
// microseconds to milliseconds of CPU, even in a sanitizer build: 10 s of CPU in one step is a spin
// (and 300 s of real time in one, a blocking call).
inline constexpr std::uint64_t default_step_limit = 1'000'000;
inline constexpr std::uint64_t default_idle_step_limit = 100'000;
inline constexpr std::chrono::milliseconds default_spin_limit{10'000};

}  // namespace sluice::apps::simulate
