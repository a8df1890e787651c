#pragma once
// stop_relay: a stop token together with the waits under it on one executor (its home).
//
// Every stop token a sluice coroutine sees lives in a relay: an executor's own, a group's
// (scope, when_all, when_any), or with_stop_token's. A wait on the relay's home executor links
// itself into the relay's intrusive, owner-only list instead of registering a std::stop_callback
// of its own (two atomic read-modify-writes and their set-up per operation). The relay registers
// ONE std::stop_callback on its token, lazily, when the first wait links. When it fires:
// - on the home thread, the relay walks its list and cancels every wait at once;
// - on another thread, it posts itself (one inbox node) to home, which then walks the list.
// A wait on another executor (a child that switched away) registers its own std::stop_callback.
//
// Lifetime: a posted relay node must run before the relay goes away. The owner calls quiesce() once
// no wait is linked; if it returns false, the node is still on its way and resume_when_quiet() hands
// it the coroutine to schedule after it ran. A group's join does exactly that.

#include <sluice/runtime/detail/inbox.hpp>

#include <atomic>
#include <cassert>
#include <coroutine>
#include <optional>
#include <stop_token>
#include <utility>

namespace sluice::runtime {
class executor;
}

namespace sluice::runtime::detail {

class stoppable_wait;

class stop_relay : inbox_node {
 public:
  // `home` may be set later (set_home), or never: then every wait registers its own callback.
  explicit stop_relay(std::stop_token token, executor* home = nullptr) noexcept
      : token_(std::move(token)), home_(home) {}
  stop_relay(const stop_relay&) = delete;
  stop_relay& operator=(const stop_relay&) = delete;
  ~stop_relay() {
    callback_.reset();
    assert(head_ == nullptr && "a stop relay was destroyed with waits linked");
    assert((!posted_.load(std::memory_order_relaxed) || ran_) && "a stop relay was destroyed before its message ran");
  }

  const std::stop_token& token() const noexcept { return token_; }
  bool stop_requested() const noexcept { return token_.stop_requested(); }
  executor* home() const noexcept { return home_; }
  void set_home(executor* home) noexcept {
    assert(head_ == nullptr && (home_ == nullptr || home_ == home));
    home_ = home;
  }

  // Home thread only (defined in executor.hpp, where stoppable_wait is complete).
  inline void link(stoppable_wait* w);
  inline void unlink(stoppable_wait* w) noexcept;

  // Home thread, no wait linked: detaches from the token. True when no relay message is on its way
  // (the relay may then be destroyed or reused); false: call resume_when_quiet().
  bool quiesce() noexcept {
    assert(head_ == nullptr && "quiesce() with waits still linked");
    callback_.reset();  // waits for a callback running on another thread: posted_ is final after it
    if (!posted_.load(std::memory_order_acquire)) return true;
    if (!ran_) return false;
    posted_.store(false, std::memory_order_relaxed);
    ran_ = false;
    return true;
  }
  // After quiesce() returned false: `h` is scheduled on home once the relay message has run.
  void resume_when_quiet(std::coroutine_handle<> h) noexcept {
    assert(!ran_ && !quiet_waiter_);
    quiet_waiter_ = h;
  }

  // Test hooks: a relay message is posted and has not run yet.
  bool message_pending() const noexcept { return posted_.load(std::memory_order_acquire) && !ran_; }

 private:
  struct fire {
    stop_relay* self;
    void operator()() const noexcept { self->stop_fired(); }
  };
  void stop_fired() noexcept;              // any thread (executor.cpp)
  static void on_message(inbox_node* self) noexcept;  // home
  void cancel_all() noexcept;              // home

  std::stop_token token_;
  executor* home_;
  stoppable_wait* head_ = nullptr;
  std::optional<std::stop_callback<fire>> callback_{};
  std::atomic<bool> posted_{false};
  bool ran_ = false;
  std::coroutine_handle<> quiet_waiter_{};
};

}  // namespace sluice::runtime::detail
