#pragma once
// thread_beat: what the stall detector (stall_detector.hpp) sees of a thread that runs executor
// turns. Written by that thread only (relaxed atomics), read by the detector's thread.
// - beat: counts turns; odd while the thread waits in the kernel for work, or has parked for good;
// - code and kind: what the current turn runs (a coroutine's resume function, a message's function,
//   or the backend's completions);
// - tid: the kernel's id of the thread.
// Per thread, not per executor: a thread that runs several executors (a simulation, a test) stalls
// them all at once.

#include <atomic>
#include <cstdint>

namespace sluice::runtime::detail {

struct thread_beat {
  enum class activity : std::uint8_t { coroutine, message, completions };
  std::atomic<std::uint64_t> beat{0};
  std::atomic<const void*> code{nullptr};
  std::atomic<activity> kind{activity::coroutine};
  int tid = 0;

  std::uint64_t now() const noexcept { return beat.load(std::memory_order_relaxed); }
  void turn() noexcept { beat.store((now() | 1) + 1, std::memory_order_relaxed); }  // even: running
  void waiting() noexcept { beat.store(now() | 1, std::memory_order_relaxed); }
  void woke() noexcept { beat.store(now() + 1, std::memory_order_relaxed); }
  void park() noexcept { waiting(); }  // no more turns on this thread
  void doing(activity what, const void* where) noexcept {
    kind.store(what, std::memory_order_relaxed);
    code.store(where, std::memory_order_relaxed);
  }
};

// The calling thread's (made on first use; executor.cpp).
thread_beat& this_thread_beat() noexcept;

}  // namespace sluice::runtime::detail
