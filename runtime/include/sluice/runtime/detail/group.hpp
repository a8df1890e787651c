#pragma once
// The machinery under when_all, when_any and scope: a group of child coroutines that share one
// stop source (linked to the parent's stop token) and are joined before the parent resumes.
// Children run on the executor that starts them; they are started by scheduling (FIFO), and the
// last one to finish hands control back to the joiner through the trampoline.
// The children's token lives in a stop_relay homed on the group's executor: their waits there link
// into it, and one callback per group (not per wait) cancels them. The join also waits for a relay
// message that a stop from another thread posted, so the group never dies under it.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>

#include <cassert>
#include <coroutine>
#include <exception>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <variant>

namespace sluice::runtime::detail {

void log_extra_child_failure(std::exception_ptr error) noexcept;

class group {
 public:
  group() = default;
  group(const group&) = delete;
  group& operator=(const group&) = delete;
  ~group() { assert(live_ == 0 && "a group was destroyed with children still running"); }

  std::stop_token const* token() const noexcept { return &relay_.token(); }
  void request_stop() noexcept { source_.request_stop(); }
  bool stop_requested() const noexcept { return relay_.stop_requested(); }
  // Test hook: a stop from another thread posted the relay's message and it has not run yet.
  bool stop_message_pending() const noexcept { return relay_.message_pending(); }

  // Forwards a stop of the parent to the children.
  void link(std::stop_token parent) {
    if (!parent.stop_possible()) return;
    if (!link_) {
      link_.emplace(std::move(parent), forward{&source_});
    } else {
      assert(!second_link_ && "a group links at most two parents");
      second_link_.emplace(std::move(parent), forward{&source_});
    }
  }

  // The executor the group lives on: children come back here before they touch group state.
  executor& home() const noexcept { return *home_; }

  template <class Promise>
  void start(std::coroutine_handle<Promise> child) {
    if (home_ == nullptr) {
      home_ = executor::current();
      relay_.set_home(home_);
    }
    assert(home_ == executor::current() && "a group's children are started on its executor");
    child.promise().group_ = this;
    child.promise().set_stop_relay(&relay_);
    executor::current()->schedule(child);  // (may throw, out of memory: then nothing changed)
    ++live_;
  }
  void child_done() noexcept {
    assert(live_ > 0);
    if (--live_ == 0 && waiter_) {
      std::coroutine_handle<> w = std::exchange(waiter_, {});
      if (relay_.quiesce()) {
        transfer_to(w);
      } else {
        relay_.resume_when_quiet(w);
      }
    }
  }
  std::size_t live() const noexcept { return live_; }

  // The first failure is kept (and stops the siblings); later ones are logged.
  void fail(std::exception_ptr error) noexcept {
    if (!error_) {
      error_ = error;
      request_stop();
    } else {
      log_extra_child_failure(error);
    }
  }
  void rethrow_if_failed() {
    if (error_) std::rethrow_exception(std::exchange(error_, {}));
  }

  struct join_awaiter {
    group* self;
    bool await_ready() const noexcept { return self->live_ == 0 && self->relay_.quiesce(); }
    void await_suspend(std::coroutine_handle<> h) noexcept {
      if (self->live_ == 0) {
        self->relay_.resume_when_quiet(h);  // only the relay's message is still on its way
      } else {
        self->waiter_ = h;
      }
    }
    void await_resume() const noexcept {}
  };
  join_awaiter join() noexcept { return {this}; }

 private:
  struct forward {
    std::stop_source* source;
    void operator()() const noexcept { source->request_stop(); }
  };
  std::stop_source source_{};
  stop_relay relay_{source_.get_token()};
  // Two links: a scope may be linked at construction and again by its join().
  std::optional<std::stop_callback<forward>> link_{};
  std::optional<std::stop_callback<forward>> second_link_{};
  executor* home_ = nullptr;
  std::size_t live_ = 0;
  std::coroutine_handle<> waiter_{};
  std::exception_ptr error_{};
};

// A child coroutine of a group. It frees its own frame when it finishes. A child that is never
// started is destroyed by its owner.
class group_child {
 public:
  struct promise_type : promise_base {
    group* group_ = nullptr;
    group_child get_return_object() noexcept {
      return group_child{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    struct final_awaiter {
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        group* g = h.promise().group_;
        h.destroy();
        g->child_done();
      }
      void await_resume() const noexcept {}
    };
    final_awaiter final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // bodies catch everything
  };

  explicit group_child(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
  group_child(group_child&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  group_child& operator=(group_child&&) = delete;
  ~group_child() {
    if (handle_) handle_.destroy();
  }
  // Once started, the child is the group's; a start that throws leaves it to this object.
  void start_in(group& g) {
    g.start(handle_);
    handle_ = {};
  }

 private:
  std::coroutine_handle<promise_type> handle_;
};

// void results become monostate in tuples and variants.
template <class T>
using value_or_monostate = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

// What a child's task produced: a value or an exception.
template <class T>
struct outcome {
  std::optional<value_or_monostate<T>> value;
  std::exception_ptr error;
};

// Runs `t`, then comes back to `home` before yielding its outcome: the task may have ended on
// another executor, and group state is touched only on the group's executor.
//
// Out of memory: a child's frame, and this one, are made before any child of the group starts
// (the parent makes them: start_children), so a child that runs allocates nothing of its own and
// a std::bad_alloc can only come before the first start, or from a start (the run queue grows),
// after which the started children are stopped and joined before the parent rethrows.
template <class T>
task<outcome<T>> settle_at_home(task<T> t, executor* home) {
  outcome<T> out;
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(t);
      out.value.emplace();
    } else {
      out.value.emplace(co_await std::move(t));
    }
  } catch (...) {
    out.error = std::current_exception();
  }
  co_await switch_to(*home);
  co_return out;
}

// Starts every child of `children` (a tuple or a range of group_child) in `g`. A start that throws
// (out of memory) stops the children already started and returns the exception: the caller joins
// the group, then rethrows it. The children not started are destroyed with `children`.
template <class Children>
std::exception_ptr start_children(Children& children, group& g) noexcept {
  try {
    if constexpr (requires { children.begin(); }) {
      for (group_child& c : children) c.start_in(g);
    } else {
      std::apply([&g](auto&... c) { (c.start_in(g), ...); }, children);
    }
    return {};
  } catch (...) {
    g.request_stop();
    return std::current_exception();
  }
}

}  // namespace sluice::runtime::detail
