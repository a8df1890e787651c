#pragma once
// task_meters: what a stream_task counts for the job's metrics (job_metrics.hpp) and status page
// (status_api.hpp), beyond its records: the bytes of the data buffers it took from its gate, and
// where its time goes. Owned by the task, touched only on its executor; times are the executor's
// clock (never a direct clock read in dataflow/).
//
// The task's time splits in three, as Flink's busy/idle/backpressured: idle (waiting for input: the
// next gate item, a quiet source, a source that has ended waiting for the order to finish),
// backpressured (waiting for a writable output partition) and busy (the rest: working, or waiting
// on its own I/O, as a sink waiting for its writes or a slow sink's delay). The two waits never
// overlap (one loop, one wait at a time), so over any window idle + backpressured <= its length.

#include <chrono>
#include <cstdint>
#include <optional>

namespace sluice::dataflow::detail {

// The time spent in one kind of wait: begin() and end() around each wait.
class wait_meter {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  void begin(time_point now) noexcept {
    if (!since_) since_ = now;
  }
  void end(time_point now) noexcept {
    if (since_) total_ += now - *since_;
    since_.reset();
  }
  // Including a wait still in progress, so a task stuck behind a full partition shows it.
  std::chrono::nanoseconds total(time_point now) const noexcept {
    return total_ + (since_ ? std::chrono::nanoseconds(now - *since_) : std::chrono::nanoseconds(0));
  }
  bool waiting() const noexcept { return since_.has_value(); }

 private:
  std::chrono::nanoseconds total_{0};
  std::optional<time_point> since_;
};

struct task_meters {
  std::uint64_t bytes_in = 0;  // data bytes of the gate's buffers the task took
  wait_meter backpressure;     // waiting for a writable output partition
  wait_meter idle;             // waiting for input
};

}  // namespace sluice::dataflow::detail
