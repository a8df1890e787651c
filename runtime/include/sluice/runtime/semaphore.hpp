#pragma once
// semaphore: an executor-local counting semaphore with FIFO hand-off. No locks.
//
// `release()` gives the permit straight to the longest waiter (scheduled, not resumed inline), so
// a later `try_acquire` cannot barge ahead of it. `acquire()` returns true with a permit, false if
// the waiting task was stopped first (no permit taken).
//
//   if (!co_await slots.acquire()) co_return;  ...  slots.release();

#include <sluice/runtime/detail/wait_list.hpp>

#include <cstddef>

namespace sluice::runtime {

class semaphore {
 public:
  explicit semaphore(std::size_t permits) noexcept : permits_(permits) {}

  std::size_t available() const noexcept { return permits_; }
  std::size_t waiters() const noexcept { return waiters_.size(); }

  bool try_acquire() noexcept {
    if (permits_ == 0 || !waiters_.empty()) return false;
    --permits_;
    return true;
  }
  void release(std::size_t n = 1) noexcept {
    for (; n > 0 && !waiters_.empty(); --n) waiters_.front()->wake();
    permits_ += n;
  }

  class awaiter : public detail::list_wait {
   public:
    explicit awaiter(semaphore& s) noexcept : sem_(&s) {}
    bool await_ready() noexcept { return sem_->try_acquire() && (acquired_ = true); }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
      enqueue(sem_->waiters_, h, detail::stop_token_of(h));
    }
    bool await_resume() const noexcept { return acquired_ || woken(); }

   private:
    semaphore* sem_;
    bool acquired_ = false;
  };
  awaiter acquire() noexcept { return awaiter{*this}; }

 private:
  std::size_t permits_;
  detail::wait_list waiters_;
};

}  // namespace sluice::runtime
