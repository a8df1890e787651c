#pragma once
// event: an executor-local manual-reset event. No locks: it belongs to one executor.
//
// `set()` wakes every waiter by scheduling them in FIFO order; it never resumes them inline, so
// the caller's state is never re-entered half-updated (invariant 3). `wait()` returns true once the
// event is set, false if the waiting task was stopped first.
//
//   event ready;  ...  if (co_await ready.wait()) use();  ...  ready.set();

#include <sluice/runtime/detail/wait_list.hpp>

namespace sluice::runtime {

class event {
 public:
  explicit event(bool initially_set = false) noexcept : set_(initially_set) {}

  bool is_set() const noexcept { return set_; }
  void set() noexcept {
    set_ = true;
    while (!waiters_.empty()) waiters_.front()->wake();
  }
  void reset() noexcept { set_ = false; }
  std::size_t waiters() const noexcept { return waiters_.size(); }

  class awaiter : public detail::list_wait {
   public:
    explicit awaiter(event& e) noexcept : event_(&e) {}
    bool await_ready() noexcept { return was_set_ = event_->set_; }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
      enqueue(event_->waiters_, h, detail::stop_token_of(h));
    }
    // Reads only this awaiter: the event may be gone by the time a woken waiter runs.
    bool await_resume() const noexcept { return was_set_ || woken(); }

   private:
    event* event_;
    bool was_set_ = false;
  };
  awaiter wait() noexcept { return awaiter{*this}; }

 private:
  bool set_;
  detail::wait_list waiters_;
};

}  // namespace sluice::runtime
