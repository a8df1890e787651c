#pragma once
// executor: one thread, one io_uring, a FIFO run queue and an inbox for other threads.
//
// Run loop (one turn):
//   1. resume up to `batch_limit` ready coroutines, in FIFO order;
//   2. run up to `batch_limit` messages from the inbox (posted functions, switch_to arrivals);
//   3. enter the kernel once: submit every prepared operation and reap completions, blocking only
//      when nothing is ready. Completions schedule their waiters; they never resume them inline.
// Wake-up rule: before blocking, the executor raises `sleeping_` and re-checks its inbox; a producer
// that pushes and then sees `sleeping_` clears it and writes the executor's eventfd, whose read is
// always in flight on the ring. So a wake-up costs a syscall only when the target really sleeps.
//
// Ownership: everything scheduled on an executor runs on its thread. `schedule`, `submit` and
// `spawn` may only be called there; `post`, `post_node`, `spawn_on` and `request_stop` from anywhere.
// A message may lead to its executor's destruction even while its poster is still inside post_node:
// the destructor waits until no thread is in post_node before it closes the eventfd.
// An executor must be constructed on the thread that runs it (the ring is single-issuer).

#include <sluice/runtime/detail/inbox.hpp>
#include <sluice/runtime/detail/ready_queue.hpp>
#include <sluice/runtime/detail/spin_policy.hpp>
#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/task.hpp>

#include <atomic>
#include <cassert>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <stop_token>
#include <utility>

namespace sluice::runtime {

namespace detail {
void log_posted_failure(const char* what) noexcept;
class stoppable_wait;
}

class simulation;
class blocking_pool;

struct executor_options {
  int id = 0;
  uring_options uring{};
  // The backend to use; null means make_backend(uring): io_uring, or epoll as SLUICE_BACKEND says
  // (created on this thread).
  std::unique_ptr<io_backend> backend{};
  // Ready coroutines resumed per loop turn before the kernel is entered again.
  unsigned batch_limit = 256;
  // Spin at most this long checking the inbox before sleeping, after recent cross-thread traffic;
  // less, or not at all, while recent spins did not pay off (detail::spin_policy). Zero: never spin.
  std::chrono::microseconds spin_before_sleep{50};
  // Under a simulation: it picks which ready coroutine each resume takes (simulation::pick_ready).
  simulation* order = nullptr;
  // Where offload() runs blocking calls (offload.hpp); null: the process-wide default pool.
  blocking_pool* blocking = nullptr;
};

class executor {
 public:
  explicit executor(executor_options options = {});
  ~executor();
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  // The executor whose loop runs on this thread, or null.
  static executor* current() noexcept { return current_; }
  bool is_current() const noexcept { return current_ == this; }

  int id() const noexcept { return id_; }
  io_backend& backend() noexcept { return *backend_; }
  std::chrono::steady_clock::time_point now() const noexcept { return backend_->now(); }
  // Run by a simulation (executor_options::order): nothing may leave its thread.
  bool simulated() const noexcept { return order_ != nullptr; }
  // The pool offload() uses from this executor (offload.hpp).
  blocking_pool& blocking() const noexcept;

  // Owner thread only.
  void schedule(std::coroutine_handle<> h) {
    assert(is_current() && "schedule() off the owning executor");
    ready_.push(h);
  }
  // Like schedule(), but `h` runs only in the next turn, after the ring is submitted and reaped:
  // for a long-running coroutine that must let I/O completions and other work through.
  void defer(std::coroutine_handle<> h) {
    assert(is_current() && "defer() off the owning executor");
    deferred_.push(h);
  }
  void submit(io_op& op) {
    assert(is_current() && "submit() off the owning executor");
    backend_->submit(op);
  }
  // Starts a detached task here; its failure is logged, never lost. Owner thread only.
  void spawn(task<void> t);

  // Any thread.
  void post_node(detail::inbox_node* node) noexcept;
  template <class F>
  void post(F&& fn);
  // Asks every task that uses this executor's stop token to stop; run() then returns once all
  // detached tasks have finished.
  void request_stop() noexcept;
  std::stop_token const* stop_token() const noexcept { return &stop_relay_.token(); }
  bool stop_requested() const noexcept { return stop_relay_.stop_requested(); }

  // Drives `t` to completion on this thread (which becomes the owner while it runs).
  template <class T>
  T block_on(task<T> t);
  // Runs until request_stop() and every detached task has finished.
  void run();
  // Requests stop and runs until no detached task, ready coroutine or operation is left (the
  // executor stays usable for messages). Owner thread.
  void drain();
  // drain(), then cancels the executor's own wake-up read. Called by the destructor; idempotent.
  void shutdown();

  std::size_t detached_tasks() const noexcept { return detached_; }
  // For a driver that runs executors itself (a simulation): a turn now would do something (a ready
  // coroutine, a message, a completion to dispatch) ...
  bool has_work() const noexcept {
    return !ready_.empty() || !deferred_.empty() || inbox_.maybe_nonempty() || backend_->has_pending_work();
  }
  // ... and drain() would return at once: no detached task, coroutine, message or operation left
  // but the wake-up read.
  bool quiescent() const noexcept {
    return detached_ == 0 && ready_.empty() && deferred_.empty() && !inbox_.maybe_nonempty() &&
           backend_->outstanding() <= (wake_armed_ ? 1u : 0u);
  }
  // Owner thread: messages posted and not yet run (counted up to `limit`), for metrics.
  std::size_t inbox_depth(std::size_t limit = 65536) const noexcept {
    assert(is_current() && "inbox_depth() off the owning executor");
    return inbox_.pending(limit);
  }
  std::uint64_t wakeups_sent() const noexcept { return wakeups_sent_.load(std::memory_order_relaxed); }

  // Internal: one loop turn (used by the drivers and by fibers).
  void turn(bool may_wait);
  void run_until(bool (*done)(void*), void* context);

 private:
  struct root_task;
  friend struct root_task;
  friend class detail::stoppable_wait;
  // The stop source's request runs on this thread only, so the relay's callback cancels the waits
  // under this executor's own token inline.
  void stop_now() noexcept;
  static root_task run_detached(task<void> t, executor* ex);
  template <class T>
  struct slot;
  template <class T>
  static root_task run_into(task<T> t, slot<T>* out, executor* home);
  void start_root(root_task&& root);

  void arm_wake();
  void wait_for_work(bool io_waiting);
  static void on_wake(io_op& op) noexcept;
  std::size_t drain_inbox(std::size_t limit);

  static inline constinit thread_local executor* current_ = nullptr;

  int id_;
  unsigned batch_limit_;
  simulation* order_;  // null outside a simulation: FIFO
  blocking_pool* blocking_;  // null: default_blocking_pool()
  detail::spin_policy spin_;
  std::unique_ptr<io_backend> backend_;
  detail::ready_queue ready_;
  detail::ready_queue deferred_;  // yield_to_io(): run next turn, after the ring was polled
  detail::mpsc_inbox inbox_;
  alignas(64) std::atomic<bool> sleeping_{false};
  // Threads inside post_node (see there): the destructor waits for none. On sleeping_'s cache line,
  // which every post reads anyway.
  std::atomic<std::uint32_t> producers_{0};
  std::atomic<std::uint64_t> wakeups_sent_{0};
  int wake_fd_ = -1;
  io_op wake_op_{};
  std::uint64_t wake_buf_ = 0;
  bool wake_armed_ = false;
  bool shut_down_ = false;
  bool recent_inbox_traffic_ = false;
  std::stop_source stop_source_{};
  // Waits under this executor's own token link here (detail::stop_relay).
  detail::stop_relay stop_relay_{stop_source_.get_token(), this};
  struct stop_message : detail::inbox_node {
    executor* owner = nullptr;
  } stop_node_{};
  std::atomic<bool> stop_posted_{false};
  std::size_t detached_ = 0;
};

// --- yield and switch_to --------------------------------------------------------------------

// co_await yield(): go to the back of the run queue.
struct yield_awaiter {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const { executor::current()->schedule(h); }
  void await_resume() const noexcept {}
};
inline yield_awaiter yield() noexcept { return {}; }

// co_await yield_to_io(): continue in the next loop turn, after the executor has submitted and
// reaped its ring and run its inbox. A coroutine that rarely waits (a source reading a cached file,
// a producer whose buffers never run out) calls it now and then, so the I/O of the others (state
// writes, fsyncs) progresses. yield() alone may resume it in the same turn.
struct yield_to_io_awaiter {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const { executor::current()->defer(h); }
  void await_resume() const noexcept {}
};
inline yield_to_io_awaiter yield_to_io() noexcept { return {}; }

// co_await switch_to(ex): continue on `ex` (through its inbox). No-op if already there.
class switch_to_awaiter : detail::inbox_node {
 public:
  explicit switch_to_awaiter(executor& target) noexcept : target_(&target) {}
  bool await_ready() const noexcept { return target_->is_current(); }
  void await_suspend(std::coroutine_handle<> h) noexcept {
    waiter_ = h;
    run = [](detail::inbox_node* self) noexcept {
      auto* me = static_cast<switch_to_awaiter*>(self);
      executor::current()->schedule(me->waiter_);
    };
    target_->post_node(this);
  }
  void await_resume() const noexcept {}

 private:
  executor* target_;
  std::coroutine_handle<> waiter_{};
};
inline switch_to_awaiter switch_to(executor& target) noexcept { return switch_to_awaiter{target}; }

// --- root tasks: the coroutine that sits under a detached task or a block_on ------------------

struct executor::root_task {
  struct promise_type : detail::promise_base {
    root_task get_return_object() noexcept {
      return root_task{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // bodies catch everything
  };
  std::coroutine_handle<promise_type> handle;
};

template <class T>
struct executor::slot {
  std::optional<T> value;
  std::exception_ptr error;
  bool done = false;
  T take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};
template <>
struct executor::slot<void> {
  std::exception_ptr error;
  bool done = false;
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

template <class T>
executor::root_task executor::run_into(task<T> t, slot<T>* out, executor* home) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(t);
    } else {
      out->value.emplace(co_await std::move(t));
    }
  } catch (...) {
    out->error = std::current_exception();
  }
  // The task may have ended on another executor: `done` is read by the home loop only.
  co_await switch_to(*home);
  out->done = true;
}

template <class T>
T executor::block_on(task<T> t) {
  slot<T> out;
  executor* previous = std::exchange(current_, this);
  start_root(run_into(std::move(t), &out, this));
  run_until([](void* s) noexcept { return static_cast<slot<T>*>(s)->done; }, &out);
  current_ = previous;
  return out.take();
}

template <class F>
void executor::post(F&& fn) {
  struct posted final : detail::inbox_node {
    std::decay_t<F> fn;
    explicit posted(F&& f) : fn(std::forward<F>(f)) {}
  };
  auto* node = new posted(std::forward<F>(fn));
  node->run = [](detail::inbox_node* self) noexcept {
    std::unique_ptr<posted> p(static_cast<posted*>(self));
    try {
      p->fn();
    } catch (const std::bad_alloc&) {
      // Out of memory part-way through a message: what it left undone cannot be told, and a job
      // that went on without it could hang or be wrong. The process ends (std::terminate; the tool
      // exits 1 naming it: memory_limit.hpp), as after a kill -9.
      std::terminate();
    } catch (const std::exception& e) {
      detail::log_posted_failure(e.what());
    } catch (...) {
      detail::log_posted_failure("unknown exception");
    }
  };
  post_node(node);
}

// Starts `t` detached on the current executor.
inline void spawn(task<void> t) {
  assert(executor::current() && "spawn() off an executor");
  executor::current()->spawn(std::move(t));
}
// Starts `t` detached on `ex`, from any thread.
void spawn_on(executor& ex, task<void> t);

// --- stoppable waits ---------------------------------------------------------------------------

namespace detail {

// Base for every suspension a stop request can end early (I/O, timers, events, semaphores,
// channels). The waiter resumes exactly once, on its owner executor, after the target has finished
// AND after any cancellation work (a cancel op, a cross-thread message) has finished too, so no
// memory of the awaiter is touched after it resumes.
//
// A stop request on the owner thread calls `cancel_on_owner()` directly; on another thread it
// posts this object (an inbox node) to the owner, which then calls `cancel_on_owner()`.
class stoppable_wait : protected inbox_node {
 public:
  stoppable_wait() = default;
  stoppable_wait(const stoppable_wait&) = delete;
  stoppable_wait& operator=(const stoppable_wait&) = delete;

 protected:
  // Called in await_suspend after the target has been started. Must be on the owner executor.
  // `relay` carries the awaiting task's stop token (null: not stoppable).
  void arm(std::coroutine_handle<> waiter, stop_relay* relay);
  // The target has finished (owner thread): detaches from the stop token. Afterwards
  // stop_was_requested() is final. Follow with release() to resume the waiter.
  void finish_target() noexcept;
  // Cancellation work that must finish before the waiter resumes (e.g. an ASYNC_CANCEL op).
  void hold() noexcept { ++pending_; }
  void release() noexcept;
  // release(), but a waiter that may run now is resumed here instead of scheduled (wake_inline).
  void release_inline() noexcept;
  bool finished() const noexcept { return finished_; }
  bool stop_was_requested() const noexcept { return stop_seen_; }
  executor* owner() const noexcept { return owner_; }

  // Runs on the owner thread at most once, only while the target has not finished.
  virtual void cancel_on_owner() noexcept = 0;
  ~stoppable_wait() = default;

 private:
  struct on_stop {
    stoppable_wait* self;
    void operator()() const noexcept { self->stop_requested(); }
  };
  void stop_requested() noexcept;
  static void on_message(inbox_node* self) noexcept;

  friend class stop_relay;
  executor* owner_ = nullptr;
  std::coroutine_handle<> waiter_{};
  stop_relay* relay_ = nullptr;  // linked in this relay's list (on the owner) until the target finishes
  stoppable_wait* relay_prev_ = nullptr;
  stoppable_wait* relay_next_ = nullptr;
  unsigned pending_ = 1;
  bool finished_ = false;
  bool stop_seen_ = false;
  bool message_handled_ = false;
  std::atomic<bool> posted_{false};
  std::optional<std::stop_callback<on_stop>> callback_{};
};

inline void stop_relay::link(stoppable_wait* w) {
  assert(w->relay_ == nullptr);
  w->relay_ = this;
  w->relay_prev_ = nullptr;
  w->relay_next_ = head_;
  if (head_ != nullptr) head_->relay_prev_ = w;
  head_ = w;
  // The one callback of the relay; if the token was stopped meanwhile, it runs here and cancels w.
  if (!callback_) callback_.emplace(token_, fire{this});
}

inline void stop_relay::unlink(stoppable_wait* w) noexcept {
  assert(w->relay_ == this);
  if (w->relay_prev_ != nullptr) w->relay_prev_->relay_next_ = w->relay_next_; else head_ = w->relay_next_;
  if (w->relay_next_ != nullptr) w->relay_next_->relay_prev_ = w->relay_prev_;
  w->relay_prev_ = w->relay_next_ = nullptr;
  w->relay_ = nullptr;
}

}  // namespace detail
}  // namespace sluice::runtime
