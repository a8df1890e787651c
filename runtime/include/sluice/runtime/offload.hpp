#pragma once
// offload: run a blocking call (a directory listing, anything io_uring has no operation for) on a
// small pool of threads, and continue on the calling executor when it returns. The executor runs
// its other coroutines meanwhile: a readdir on a slow NFS server stalls one task, not the executor.
//
//   std::vector<std::string> names;
//   int rc = 0;
//   auto list = [&] { rc = runtime::sys().list_directory(dir.c_str(), names, max); };
//   co_await runtime::offload(list);   // `list` is a named local: it outlives the await
//
// - The callable runs exactly once, on a pool thread, then the awaiter resumes on the executor it
//   awaited from (through that executor's inbox). Its result (or exception) is what co_await
//   yields (or rethrows). The callable is taken by reference: it must be a named object that
//   outlives the await (never a lambda written inside the co_await expression: GCC 12 pitfall).
// - Not cancellable: a blocking call cannot be interrupted, so a stop request waits for it.
// - Inline, on the calling thread, when there is no pool to use: off an executor, under a
//   simulation (simulation.hpp: one thread, seeded order, and the call must land on the simulated
//   system), on a backend with a virtual clock (the test backend: its clock jumps to the next timer
//   while nothing runs, so a call on another thread would race virtual time), or while the
//   thread's system (system.hpp) is not the host's (a test's stand-in, which the pool's threads
//   would not see). Then nothing changes but that the call runs here.
// - The pool: an engine owns one (engine_options::blocking_threads threads at most, made lazily
//   on first use, joined when the engine stops); executors outside an engine share a process-wide
//   one (default_blocking_pool), joined at exit. Pool threads block every signal.
// - What runs there must not touch executor-owned state: it gets its inputs by reference from the
//   awaiting frame and writes its outputs there, and the executor reads them only after resuming.

#include <sluice/runtime/detail/inbox.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/system.hpp>

#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace sluice::runtime {

namespace detail {

// One queued call: run() on a pool thread, then posted (as an inbox node) to its executor.
struct blocking_job : inbox_node {
  void (*work)(blocking_job* self) noexcept = nullptr;
  executor* home = nullptr;
  blocking_job* next_job = nullptr;
};

}  // namespace detail

class blocking_pool {
 public:
  // At most `max_threads` threads (at least 1), started as calls arrive and none is idle.
  explicit blocking_pool(unsigned max_threads = 4);
  ~blocking_pool();
  blocking_pool(const blocking_pool&) = delete;
  blocking_pool& operator=(const blocking_pool&) = delete;

  // Any thread. Runs job->work on a pool thread, then posts the job to job->home.
  void submit(detail::blocking_job* job);
  // Runs what is queued, then joins every thread. A later submit starts threads again.
  void shutdown() noexcept;
  // Threads running now (for tests).
  std::size_t threads() const noexcept;

 private:
  struct state;
  state* state_;
};

// The pool of executors that belong to no engine; its threads are joined at exit.
blocking_pool& default_blocking_pool();

namespace detail {
// Whether an offload from this thread runs inline (see the top).
bool offload_inline() noexcept;
}  // namespace detail

template <class F>
class offload_awaiter : detail::blocking_job {
  using result_type = std::invoke_result_t<F&>;
  using stored = std::conditional_t<std::is_void_v<result_type>, bool, result_type>;

 public:
  explicit offload_awaiter(F& fn) noexcept : fn_(&fn) {}

  bool await_ready() {
    if (!detail::offload_inline()) return false;
    call();
    return true;
  }
  void await_suspend(std::coroutine_handle<> h) {
    waiter_ = h;
    home = executor::current();
    work = [](detail::blocking_job* self) noexcept { static_cast<offload_awaiter*>(self)->call(); };
    run = [](detail::inbox_node* self) noexcept {
      auto* me = static_cast<offload_awaiter*>(static_cast<detail::blocking_job*>(self));
      executor::current()->schedule(me->waiter_);
    };
    home->blocking().submit(this);
  }
  result_type await_resume() {
    if (error_) std::rethrow_exception(error_);
    if constexpr (!std::is_void_v<result_type>) return std::move(*value_);
  }

 private:
  void call() noexcept {
    try {
      if constexpr (std::is_void_v<result_type>) {
        (*fn_)();
      } else {
        value_.emplace((*fn_)());
      }
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  F* fn_;
  std::coroutine_handle<> waiter_{};
  std::optional<stored> value_{};
  std::exception_ptr error_{};
};

// co_await offload(fn): fn() on the pool (see the top); `fn` must outlive the await.
template <class F>
offload_awaiter<F> offload(F& fn) noexcept {
  return offload_awaiter<F>(fn);
}
template <class F>
void offload(const F&& fn) = delete;  // a temporary would die before the call ran

}  // namespace sluice::runtime
