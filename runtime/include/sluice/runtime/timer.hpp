#pragma once
// Timers: sleep_for, sleep_until and a timeout on any task.
//
// A sleep is one backend timeout operation, so it is cancellable like any I/O: if the awaiting
// task's stop token fires, the sleep ends early and returns false. Deadlines use the executor's
// clock (steady_clock, or the test backend's virtual clock).
//
//   if (!co_await sleep_for(10ms)) co_return;  // stopped
//   std::optional<int> v = co_await with_timeout(fetch(), 500ms);  // nullopt: timed out

#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/when_any.hpp>

#include <chrono>
#include <optional>
#include <type_traits>

namespace sluice::runtime {

class sleep_awaitable : public io_awaitable {
 public:
  explicit sleep_awaitable(std::chrono::steady_clock::time_point deadline) noexcept
      : io_awaitable(make_op(deadline)) {}
  // True when the deadline passed; false when the sleep was cancelled.
  bool await_resume() const noexcept { return op_.result == -ETIME || op_.result == 0; }

 private:
  static io_op make_op(std::chrono::steady_clock::time_point deadline) noexcept {
    io_op op;
    op.code = op_code::timeout;
    op.deadline = deadline;
    return op;
  }
};

inline sleep_awaitable sleep_until(std::chrono::steady_clock::time_point deadline) noexcept {
  return sleep_awaitable{deadline};
}
inline sleep_awaitable sleep_for(std::chrono::nanoseconds duration) noexcept {
  return sleep_awaitable{executor::current()->now() + duration};
}

namespace detail {
task<bool> sleep_task(std::chrono::nanoseconds duration);
}

// Runs `t`; if it has not finished after `duration`, stops it (through its stop token), waits for it
// to finish, and yields nullopt (false for a void task). Works for any task that honours its stop
// token, which every sluice operation does.
template <class T>
task<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> with_timeout(task<T> t,
                                                                                 std::chrono::nanoseconds duration) {
  auto result = co_await when_any(std::move(t), detail::sleep_task(duration));
  if constexpr (std::is_void_v<T>) {
    co_return result.index == 0;
  } else {
    if (result.index == 0) co_return std::optional<T>(std::move(std::get<0>(result.value)));
    co_return std::optional<T>{};
  }
}

}  // namespace sluice::runtime
