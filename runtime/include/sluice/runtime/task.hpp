#pragma once
// task<T>: a lazy, move-only coroutine that produces a T (or throws).
//
// Guarantees:
// - Lazy: a task runs only when awaited (or handed to spawn/scope/sync_wait). A task that is never
//   awaited never runs, and destroying it frees its frame.
// - Symmetric transfer without stack growth, at every optimisation level: GCC 12 does not turn an
//   `await_suspend` that returns a handle into a tail call at -O0 or under ASan, so a long chain of
//   awaits would overflow the stack. Instead an awaiter hands the next coroutine to the trampoline
//   (`detail::transfer_to`) and returns; the trampoline that resumed the current coroutine resumes
//   the next one. Every resume in sluice goes through `detail::resume`.
// - An exception thrown in a task propagates to its awaiter.
// - Cancellation flows down: an awaited task sees its awaiter's stop token (`current_stop_token`).
//
//   task<int> answer() { co_return 42; }
//   task<void> caller() { int v = co_await answer(); }

#include <sluice/runtime/detail/stop_relay.hpp>

#include <cassert>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace sluice::runtime {

template <class T = void>
class task;

namespace detail {

// The coroutine the running trampoline resumes next.
inline constinit thread_local std::coroutine_handle<> next_handle{};
// Live coroutine frames allocated minus freed on this thread (see live_frames()).
inline constinit thread_local std::int64_t thread_frames = 0;

// True while this thread runs a coroutine (resumed below), an executor's messages or I/O
// completions. Those only schedule coroutines (invariant 3), so a resume then would run one inline,
// on another's stack, in the middle of what woke it: `resume` refuses (nested_resume()).
inline constinit thread_local bool dispatching = false;
// Prints why and aborts.
[[noreturn]] void nested_resume() noexcept;

// Resumes `h`, then every coroutine handed over with transfer_to, until none is left.
inline void resume(std::coroutine_handle<> h) noexcept {
  if (dispatching) nested_resume();
  dispatching = true;
  while (h) {
    h.resume();
    h = std::exchange(next_handle, {});
  }
  dispatching = false;
}

// Called from an await_suspend: `h` runs as soon as the current coroutine has suspended.
inline void transfer_to(std::coroutine_handle<> h) noexcept {
  assert(!next_handle && "two transfers in one suspension");
  next_handle = h;
}

inline constexpr stop_relay* no_stop_token = nullptr;

// Frame allocation with a per-thread live count, so tests can prove that no frame leaks.
struct frame_allocation {
  static void* operator new(std::size_t size) {
    ++thread_frames;
    return ::operator new(size);
  }
  static void operator delete(void* p, std::size_t size) noexcept {
    --thread_frames;
#if defined(__cpp_sized_deallocation)
    ::operator delete(p, size);
#else
    (void)size;
    ::operator delete(p);
#endif
  }
};

// Folds this thread's frame count into the process-wide count (done when an executor thread ends).
void fold_thread_frames() noexcept;

class promise_base : public frame_allocation {
 public:
  std::suspend_always initial_suspend() noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() noexcept { return false; }
    template <class P>
    void await_suspend(std::coroutine_handle<P> self) noexcept {
      if (auto c = self.promise().continuation_) transfer_to(c);
    }
    void await_resume() noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }

  void set_continuation(std::coroutine_handle<> c) noexcept { continuation_ = c; }
  // The stop token (in its relay) of whoever awaits this task; it outlives the task (the awaiter
  // is suspended).
  void set_stop_relay(stop_relay* relay) noexcept { stop_relay_ = relay; }
  stop_relay* relay() const noexcept { return stop_relay_; }

 private:
  std::coroutine_handle<> continuation_{};
  stop_relay* stop_relay_ = no_stop_token;
};

// The stop token (in its relay) of the coroutine behind `h`, if it is a sluice coroutine;
// otherwise none.
template <class P>
stop_relay* stop_token_of(std::coroutine_handle<P> h) noexcept {
  if constexpr (std::is_base_of_v<promise_base, P>) {
    return h.promise().relay();
  } else {
    (void)h;
    return no_stop_token;
  }
}

template <class T>
class task_promise final : public promise_base {
 public:
  task<T> get_return_object() noexcept;
  void unhandled_exception() noexcept { error_ = std::current_exception(); }
  template <class V>
    requires std::is_convertible_v<V&&, T>
  void return_value(V&& v) noexcept(std::is_nothrow_constructible_v<T, V&&>) {
    ::new (static_cast<void*>(&storage_)) T(std::forward<V>(v));
    has_value_ = true;
  }
  T take() {
    if (error_) std::rethrow_exception(error_);
    assert(has_value_ && "task result taken twice or task not finished");
    return std::move(*value_ptr());
  }
  ~task_promise() {
    if (has_value_) value_ptr()->~T();
  }

 private:
  T* value_ptr() noexcept { return std::launder(reinterpret_cast<T*>(&storage_)); }
  alignas(T) unsigned char storage_[sizeof(T)];
  bool has_value_ = false;
  std::exception_ptr error_;
};

template <>
class task_promise<void> final : public promise_base {
 public:
  task<void> get_return_object() noexcept;
  void unhandled_exception() noexcept { error_ = std::current_exception(); }
  void return_void() noexcept {}
  void take() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
};

}  // namespace detail

template <class T>
class [[nodiscard]] task {
 public:
  using promise_type = detail::task_promise<T>;
  using value_type = T;
  using handle_type = std::coroutine_handle<promise_type>;

  task() noexcept = default;
  explicit task(handle_type h) noexcept : handle_(h) {}
  task(task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() { destroy(); }

  bool valid() const noexcept { return static_cast<bool>(handle_); }
  bool done() const noexcept { return handle_ && handle_.done(); }

  struct awaiter {
    handle_type handle;
    bool await_ready() const noexcept { return false; }
    template <class P>
    void await_suspend(std::coroutine_handle<P> caller) noexcept {
      handle.promise().set_continuation(caller);
      handle.promise().set_stop_relay(detail::stop_token_of(caller));
      detail::transfer_to(handle);
    }
    T await_resume() { return handle.promise().take(); }
  };
  awaiter operator co_await() && noexcept {
    assert(handle_ && "awaiting an empty task");
    return awaiter{handle_};
  }
  awaiter operator co_await() & noexcept {
    assert(handle_ && "awaiting an empty task");
    return awaiter{handle_};
  }

  // For the runtime's own drivers (sync_wait, spawn, when_all): the raw handle.
  handle_type handle() const noexcept { return handle_; }
  handle_type release() noexcept { return std::exchange(handle_, {}); }

 private:
  void destroy() noexcept {
    if (handle_) std::exchange(handle_, {}).destroy();
  }
  handle_type handle_{};
};

namespace detail {
template <class T>
task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>{std::coroutine_handle<task_promise<T>>::from_promise(*this)};
}
inline task<void> task_promise<void>::get_return_object() noexcept {
  return task<void>{std::coroutine_handle<task_promise<void>>::from_promise(*this)};
}
}  // namespace detail

// Live coroutine frames in the process: exact when no other thread is running tasks
// (executor threads fold their counts in when they end).
std::int64_t live_frames() noexcept;

// Awaiting this yields the stop token of the current task (never null: an empty token if none).
struct current_stop_token_t {
  detail::stop_relay* relay = nullptr;
  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> caller) noexcept {
    relay = detail::stop_token_of(caller);
    return false;
  }
  std::stop_token await_resume() const noexcept { return relay ? relay->token() : std::stop_token{}; }
};
inline current_stop_token_t current_stop_token() noexcept { return {}; }

// Awaits `t` under `token` instead of the awaiter's own stop token (for code that owns a
// std::stop_source, e.g. a server's shutdown switch). The token is kept in this frame, in a relay
// without a home: each wait under it registers its own std::stop_callback.
template <class T>
task<T> with_stop_token(task<T> t, std::stop_token token) {
  struct awaiter {
    task<T>* inner;
    detail::stop_relay* relay;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> caller) noexcept {
      inner->handle().promise().set_continuation(caller);
      inner->handle().promise().set_stop_relay(relay);
      detail::transfer_to(inner->handle());
    }
    T await_resume() { return inner->handle().promise().take(); }
  };
  detail::stop_relay relay{std::move(token)};
  co_return co_await awaiter{&t, &relay};
}

}  // namespace sluice::runtime
