// Small pieces of the runtime: frame accounting, group failure logging, scope, sleep tasks.

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/runtime/timer.hpp>

#include <atomic>

namespace sluice::runtime {

namespace {
std::atomic<std::int64_t> folded_frames{0};

std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "non-standard exception";
  }
}
}  // namespace

namespace detail {

void fold_thread_frames() noexcept {
  folded_frames.fetch_add(std::exchange(thread_frames, 0), std::memory_order_relaxed);
}

void log_extra_child_failure(std::exception_ptr error) noexcept {
  try {
    log::error("a concurrent task also failed (only the first failure is rethrown): {}", describe(error));
  } catch (...) {
  }
}

group_child scope_child(task<outcome<void>> settled, group* g) {
  auto result = co_await std::move(settled);
  if (result.error) g->fail(result.error);
}

task<bool> sleep_task(std::chrono::nanoseconds duration) { co_return co_await sleep_for(duration); }

}  // namespace detail

std::int64_t live_frames() noexcept {
  return folded_frames.load(std::memory_order_relaxed) + detail::thread_frames;
}

task<void> scope::join() {
  group_.link(co_await current_stop_token());
  co_await group_.join();
  group_.rethrow_if_failed();
}

}  // namespace sluice::runtime
