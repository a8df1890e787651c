#pragma once
// Vocabulary shared by every part of snapshot/: checkpoint ids, modes, and how a checkpoint ends.
//
// A checkpoint id is positive and grows: the coordinator never reuses or lowers one, so "newer" is
// "larger" everywhere (barrier handler, channel-state writer, storage, recovery). 0 means "none".

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::snapshot {

using checkpoint_id = std::uint64_t;
inline constexpr checkpoint_id no_checkpoint = 0;

// Identifies a task within a job: stable across restarts (it names the task's state file).
using task_id = std::uint32_t;

enum class checkpoint_mode : std::uint8_t {
  aligned,          // block each channel at its barrier until every channel's barrier is in
  unaligned,        // snapshot at the first barrier; in-flight buffers become channel state
  aligned_timeout,  // aligned, switching to unaligned when alignment exceeds a timeout
  at_least_once,    // never blocks; records after a barrier may be counted twice after recovery
};
std::string_view to_string(checkpoint_mode mode) noexcept;  // "aligned", "unaligned", ...

// Why a checkpoint did not complete. Each names a cause a user can read in a log line.
enum class abort_reason : std::uint8_t {
  subsumed,         // a newer checkpoint started before this one finished
  declined,         // a task declined it (see the detail text)
  io_error,         // a state write failed (ENOSPC, EIO, ...): the detail names the file and errno
  cancelled,        // the task or the job is shutting down
  expired,          // the coordinator's timeout passed
  not_ready,        // the task is still replaying recovered channel state (scenario 11)
  cancelled_by_barrier,  // an upstream task sent a cancellation marker
  coordinator,      // the coordinator aborted it (another task declined, or it was superseded)
};
std::string_view to_string(abort_reason reason) noexcept;  // "subsumed", "declined", ...

// What result(id) yields: never "missing" (invariant 4).
struct checkpoint_outcome {
  enum class status : std::uint8_t { completed, aborted };
  status state = status::aborted;
  abort_reason reason = abort_reason::cancelled;  // when aborted
  std::string detail;                             // when aborted: more about the reason
  std::uint64_t channel_state_bytes = 0;          // when completed
  std::uint64_t operator_state_bytes = 0;         // when completed
  std::chrono::nanoseconds fsync_duration{0};     // when completed: the state file's fsync (a writer's)

  bool completed() const noexcept { return state == status::completed; }
  static checkpoint_outcome aborted(abort_reason r, std::string why = {}) {
    return {status::aborted, r, std::move(why), 0, 0};
  }
};

}  // namespace sluice::snapshot
