#pragma once
// Waiters of the executor-local primitives (event, semaphore, channel): an intrusive FIFO list of
// stoppable waits. A waiter is woken by scheduling it (never by calling into it), and a stop request
// unlinks it and wakes it with "stopped". Everything here runs on the owning executor.

#include <sluice/runtime/executor.hpp>

#include <cassert>

namespace sluice::runtime::detail {

class list_wait;

class wait_list {
 public:
  wait_list() = default;
  wait_list(const wait_list&) = delete;
  wait_list& operator=(const wait_list&) = delete;
  ~wait_list() { assert(empty() && "a primitive was destroyed with waiters"); }

  bool empty() const noexcept { return head_ == nullptr; }
  std::size_t size() const noexcept { return size_; }
  list_wait* front() const noexcept { return head_; }
  inline void push_back(list_wait* w) noexcept;
  inline void remove(list_wait* w) noexcept;

 private:
  list_wait* head_ = nullptr;
  list_wait* tail_ = nullptr;
  std::size_t size_ = 0;
};

class list_wait : public stoppable_wait {
 public:
  // True when woken by the primitive; false when stopped.
  bool woken() const noexcept { return woken_; }

  // The primitive hands this waiter what it waited for: unlink and schedule (owner thread).
  void wake() noexcept {
    unlink_woken();
    release();
  }
  // Like wake(), but resumes the waiter at once, on this stack. Invariant 3 forbids it: only the
  // inline-recycle planted bug (plant.hpp) calls it.
  void wake_inline() noexcept {
    unlink_woken();
    release_inline();
  }

 private:
  void unlink_woken() noexcept {
    assert(list_ != nullptr);
    list_->remove(this);
    woken_ = true;
    finish_target();
  }

 protected:
  void enqueue(wait_list& list, std::coroutine_handle<> h, stop_relay* relay) {
    list.push_back(this);
    arm(h, relay);
  }

 private:
  friend class wait_list;
  void cancel_on_owner() noexcept override {
    if (list_ == nullptr) return;
    list_->remove(this);
    finish_target();
    release();
  }
  wait_list* list_ = nullptr;
  list_wait* prev_ = nullptr;
  list_wait* next_ = nullptr;
  bool woken_ = false;
};

inline void wait_list::push_back(list_wait* w) noexcept {
  assert(w->list_ == nullptr);
  w->list_ = this;
  w->prev_ = tail_;
  w->next_ = nullptr;
  if (tail_) tail_->next_ = w; else head_ = w;
  tail_ = w;
  ++size_;
}

inline void wait_list::remove(list_wait* w) noexcept {
  assert(w->list_ == this);
  if (w->prev_) w->prev_->next_ = w->next_; else head_ = w->next_;
  if (w->next_) w->next_->prev_ = w->prev_; else tail_ = w->prev_;
  w->list_ = nullptr;
  w->prev_ = w->next_ = nullptr;
  --size_;
}

}  // namespace sluice::runtime::detail
