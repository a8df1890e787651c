#pragma once
// task_meters: what a stream_task counts for the job's metrics (job_metrics.hpp), beyond its
// records: the bytes of the data buffers it took from its gate, and the time it waited for a
// writable output partition (backpressure). Owned by the task, touched only on its executor; times
// are the executor's clock (never a direct clock read in dataflow/).

#include <chrono>
#include <cstdint>
#include <optional>

namespace sluice::dataflow::detail {

class backpressure_meter {
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
  backpressure_meter backpressure;
};

}  // namespace sluice::dataflow::detail
