#pragma once
// host_calls: a serial lane of calls into the host (a job's callbacks: a terminal's status line,
// sd_notify, a user's hook) on a thread of its own, so that a host that does not keep up (a paused
// terminal, a busy service manager whose socket is full, a hook that blocks) slows the lane, never
// an executor (invariant 5).
//
//   runtime::host_calls host;                        // the thread starts with the first call
//   host.post([=] { on_checkpoint(stats); });        // any thread; runs in order
//   host.post_latest(progress_slot, [=] { on_progress(p); });  // coalesced: only the newest waits
//   co_await host.drained();                         // on an executor: all posted so far has run
//
// - Calls run one at a time, in the order they were posted (a coalesced call keeps the place of
//   the first one it replaced).
// - Bounded: at most `capacity` calls wait; a post beyond that is dropped and counted (dropped()),
//   never waited for. post_latest never grows the queue by more than one per slot.
// - Inline: constructed with `inline_calls` (a simulation: one thread, seeded order), every post runs
//   its call at once on the posting thread, and drained() is ready at once.
// - The destructor runs what is still queued, then joins the thread. A call that never returns
//   keeps it waiting: the lane holds the host's own code, which only the host can end.
// - A call that throws is logged and dropped; the lane goes on.

#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace sluice::runtime {

class host_calls {
 public:
  static constexpr std::size_t default_capacity = 1024;
  explicit host_calls(bool inline_calls = false, std::size_t capacity = default_capacity);
  ~host_calls();
  host_calls(const host_calls&) = delete;
  host_calls& operator=(const host_calls&) = delete;

  // Any thread. Queues `call`; false if the lane is full (the call is dropped and counted).
  bool post(std::function<void()> call);
  // Any thread. Queues `call` for `slot` (0..7), replacing one of that slot still waiting.
  void post_latest(unsigned slot, std::function<void()> call);
  // On an executor: resumes once every call posted before has run (through the blocking-work pool,
  // so the executor runs on meanwhile).
  task<void> drained();
  // Any thread, blocking: the same.
  void wait_drained();

  std::uint64_t dropped() const noexcept;
  // The call running now has run for this long (0 when idle): for a slow-host warning.
  std::int64_t running_for_ms() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace sluice::runtime
