#pragma once
// stall_detector: finds an executor that has not turned for longer than a threshold (a blocking
// call on it, or a coroutine that computes for too long without yielding: invariant 5), logs what
// it is running, and counts it. The engine runs one (engine_options::stalls); the test suite makes a
// long one fatal (SLUICE_STALL_FATAL_MS), so a blocking call anywhere in the suite fails its test.
//
// How: a thread of its own samples every executor thread's beat (thread_beat.hpp) a few times per
// threshold. A beat that did not change while the executor was not waiting in the kernel is a
// turn still running. Time the thread spent waiting for a CPU (/proc/self/task/<tid>/schedstat) is
// not counted, so a loaded machine that does not schedule the thread is not a stall; time blocked in
// a system call, or computing, is. The report names the executor, how long, what the turn runs (a
// coroutine's, a message's or the completions' code: its name when the binary exports the symbol,
// else the binary and offset to give addr2line) and, when the thread is blocked in a system call,
// which one.
//
// Options: engine_options::stalls (stall_options, engine.hpp).

#include "thread_beat.hpp"

#include <sluice/runtime/engine.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::runtime {

class stall_detector {
 public:
  // Watches the threads of `beats` (executor i runs on beats[i]'s thread) until destroyed or
  // stop(). A thread must park() its beat before it ends.
  stall_detector(std::vector<detail::thread_beat*> beats, stall_options options);
  ~stall_detector();
  stall_detector(const stall_detector&) = delete;
  stall_detector& operator=(const stall_detector&) = delete;

  // Stops watching and joins the thread (idempotent).
  void stop() noexcept;
  // Stalls found so far, by executor index, and in all.
  std::uint64_t stalls(std::size_t executor) const noexcept;
  std::uint64_t stalls() const noexcept;

  // The report's words for what the thread of `beat` runs now.
  static std::string describe_activity(const detail::thread_beat& beat);

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace sluice::runtime
