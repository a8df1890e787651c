// Fibers on Boost.Context (see fiber.hpp).
//
// Protocol between a fiber and its driver (the drive_fiber coroutine, whose frame owns the
// fiber_core and so the fiber's stack):
//   1. The driver switches into the fiber (switch_in); user code runs on the fiber's stack.
//   2. `await(x)` wraps x into a request task, parks it in the core and switches back
//      (suspend_for). The driver co_awaits the request like any task, so the request sees the
//      driver's stop token and the executor runs other coroutines meanwhile. The driver keeps the
//      request's exception for the fiber, returns to its home executor if the request moved, and
//      goes back to 1.
//   3. When fn returns, the fiber finishes; the driver rethrows what escaped fn.
// Destruction: if the driver's frame is destroyed while the fiber is suspended, ~fiber_core sets
// `unwinding_` and switches in once more. The pending await throws fiber_unwind, the fiber's
// destructors run, the entry catches it and the fiber returns normally. So Boost's own
// forced_unwind path (~fiber on a suspended fiber) is never taken.
// ASan: Boost 1.74 annotates only its ucontext back end (BOOST_USE_ASAN); the default fcontext
// back end, used here, switches stacks behind ASan's back. So every switch below is bracketed by
// __sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber, and a stack's shadow is
// unpoisoned before it is unmapped (a frame that never returned, such as Boost's fiber_entry,
// leaves poisoned redzones that a later mapping at the same address would inherit).
// TSan: each fiber gets its own TSan context (shadow call stack and vector clock), entered right
// before each jump onto the fiber's stack and left right before the jump back. The driver's
// context is learnt at every switch in. A finishing fiber returns through Boost's frames, which
// TSan saw entered on the fiber's context, so the driver takes its context back only once the
// fiber has left for good (switch_in). Creation runs on the fiber's context too: Boost enters
// fiber_entry on the new stack and jumps straight back, and that frame belongs to the fiber.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/memory_limit.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <boost/context/fiber.hpp>
#include <boost/context/preallocated.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <boost/context/stack_context.hpp>
#include <boost/context/stack_traits.hpp>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#define SLUICE_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLUICE_FIBER_ASAN 1
#endif
#endif
#if defined(SLUICE_FIBER_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#include "sanitizers.hpp"
#if defined(SLUICE_TSAN_ACTIVE)
#include <sanitizer/tsan_interface.h>
#endif

namespace sluice::runtime {

namespace detail {
namespace {

namespace ctx = boost::context;

// A stack as ASan sees it: [bottom, bottom + size).
struct stack_bounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};

// Before a switch: `fake_stack` saves the leaving side's fake stack (null: the leaving fiber ends).
inline void start_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] stack_bounds to) noexcept {
#if defined(SLUICE_FIBER_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
#endif
}

// After a switch, on the arriving side; `from` receives the stack that was left.
inline void finish_switch([[maybe_unused]] void* fake_stack, [[maybe_unused]] stack_bounds* from) noexcept {
#if defined(SLUICE_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, from ? &from->bottom : nullptr, from ? &from->size : nullptr);
#endif
}

// TSan's context for the code running now (a thread's or a fiber's); null without TSan.
inline void* tsan_current() noexcept {
#if defined(SLUICE_TSAN_ACTIVE)
  return __tsan_get_current_fiber();
#else
  return nullptr;
#endif
}

// Right before a jump: TSan attributes what follows to `to`, ordered after what came before.
inline void tsan_switch([[maybe_unused]] void* to) noexcept {
#if defined(SLUICE_TSAN_ACTIVE)
  __tsan_switch_to_fiber(to, 0);
#endif
}

inline void* tsan_create() noexcept {
#if defined(SLUICE_TSAN_ACTIVE)
  return __tsan_create_fiber(0);
#else
  return nullptr;
#endif
}

inline void tsan_destroy([[maybe_unused]] void* context) noexcept {
#if defined(SLUICE_TSAN_ACTIVE)
  if (context != nullptr) __tsan_destroy_fiber(context);
#endif
}

// One freed stack per thread, kept for the thread's next fiber of the same size: a task whose chain
// runs on a fiber (a blocking operator's, or a keyed one's events: pace_point) starts one per buffer
// or event, and mapping, protecting and unmapping a stack each time cost three system calls.
struct spare_stack {
  ctx::stack_context stack{};
  ~spare_stack() {
    if (stack.sp != nullptr) ctx::protected_fixedsize_stack(stack.size).deallocate(stack);
  }
};
constinit thread_local spare_stack spare;

// protected_fixedsize_stack (guard page below the stack) that clears ASan's shadow before unmapping
// (or before keeping the stack as the thread's spare: a later fiber starts on clean shadow).
class fiber_stack_allocator {
 public:
  explicit fiber_stack_allocator(std::size_t bytes) noexcept : inner_(bytes), bytes_(bytes) {}
  ctx::stack_context allocate() {
    if (spare.stack.sp != nullptr && spare.stack.size >= bytes_ && spare.stack.size < 2 * bytes_ + 2 * 4096) {
      return std::exchange(spare.stack, ctx::stack_context{});
    }
    return inner_.allocate();
  }
  void deallocate(ctx::stack_context& stack) noexcept {
#if defined(SLUICE_FIBER_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(stack.sp) - stack.size, stack.size);
#endif
    if (spare.stack.sp == nullptr) {
      spare.stack = stack;
      return;
    }
    inner_.deallocate(stack);
  }

 private:
  ctx::protected_fixedsize_stack inner_;
  std::size_t bytes_;
};

// The fiber currently running on this thread, or null.
constinit thread_local class fiber_core* current_core = nullptr;

class fiber_core {
 public:
  fiber_core(fiber_body body, void* context, const fiber_options& options)
      : body_(body), context_(context) {
    const std::size_t bytes = std::max(options.stack_bytes, ctx::stack_traits::minimum_size());
    fiber_stack_allocator allocator(bytes);
    ctx::stack_context stack;
    try {
      stack = allocator.allocate();
    } catch (const std::bad_alloc&) {
      throw std::system_error(ENOMEM, std::generic_category(),
                              "run_fiber: map a fiber stack of " + std::to_string(bytes) +
                                  " bytes (out of memory, or of vm.max_map_count: each fiber maps two regions)" +
                                  address_space_note());
    }
    fiber_stack_ = {static_cast<char*>(stack.sp) - stack.size, stack.size};
    fiber_tsan_ = tsan_create();
    void* const creator_tsan = tsan_current();
    tsan_switch(fiber_tsan_);
    // Boost jumps onto the new stack and straight back here, before any of our code runs there.
    fiber_ = ctx::fiber(std::allocator_arg, ctx::preallocated(stack.sp, stack.size, stack), allocator,
                        entry_fn{this});
    tsan_switch(creator_tsan);
  }

  ~fiber_core() {
    if (fiber_) {
      // The driver is being destroyed while the fiber is suspended: unwind the fiber's stack.
      unwinding_ = true;
      switch_in();
      assert(!fiber_ && "fiber did not finish while unwinding");
    }
    tsan_destroy(fiber_tsan_);
  }

  fiber_core(const fiber_core&) = delete;
  fiber_core& operator=(const fiber_core&) = delete;

  // --- driver side ---
  bool finished() const noexcept { return !fiber_; }

  // Runs the fiber until it awaits something or finishes.
  void switch_in() noexcept {
    fiber_core* previous = std::exchange(current_core, this);
    void* fake_stack = nullptr;
    start_switch(&fake_stack, fiber_stack_);
    driver_tsan_ = tsan_current();
    tsan_switch(fiber_tsan_);
    fiber_ = std::move(fiber_).resume();
    // A suspending fiber gave the driver its context back before jumping; a finished one did not.
    if (!fiber_) tsan_switch(driver_tsan_);
    finish_switch(fake_stack, nullptr);
    current_core = previous;
  }

  task<void> take_request() noexcept {
    assert(request_.valid() && "a fiber suspended without a request");
    return std::move(request_);
  }
  void fail_request(std::exception_ptr error) noexcept { request_error_ = std::move(error); }

  void rethrow_if_failed() const {
    if (error_) std::rethrow_exception(error_);
  }

  // --- fiber side ---
  void suspend_for(task<void> request) {
    if (unwinding_) throw fiber_unwind{};
    request_ = std::move(request);
    void* fake_stack = nullptr;
    start_switch(&fake_stack, driver_stack_);
    tsan_switch(driver_tsan_);
    driver_ = std::move(driver_).resume();
    finish_switch(fake_stack, &driver_stack_);
    if (unwinding_) throw fiber_unwind{};
    if (request_error_) std::rethrow_exception(std::exchange(request_error_, nullptr));
  }

 private:
  struct entry_fn {
    fiber_core* core;
    ctx::fiber operator()(ctx::fiber&& driver) const noexcept { return core->entry(std::move(driver)); }
  };

  // The first code on the fiber's stack; returning switches to the driver for good.
  ctx::fiber entry(ctx::fiber&& driver) noexcept {
    finish_switch(nullptr, &driver_stack_);
    driver_ = std::move(driver);
    if (!unwinding_) {
      try {
        body_(context_);
      } catch (...) {  // includes fiber_unwind, which ends the fiber like a return
        error_ = std::current_exception();
      }
    }
    start_switch(nullptr, driver_stack_);
    return std::move(driver_);
  }

  fiber_body body_;
  void* context_;
  stack_bounds fiber_stack_{};
  stack_bounds driver_stack_{};  // learnt at every switch in: the driver may run on any stack
  void* fiber_tsan_ = nullptr;   // TSan contexts (null without TSan); the driver's is learnt too
  void* driver_tsan_ = nullptr;
  ctx::fiber fiber_{};           // the suspended fiber, held by the driver
  ctx::fiber driver_{};          // the suspended driver, held by the running fiber
  task<void> request_{};
  std::exception_ptr request_error_{};
  std::exception_ptr error_{};
  bool unwinding_ = false;
};

}  // namespace

task<void> drive_fiber(fiber_body body, void* context, fiber_options options) {
  executor* home = executor::current();
  fiber_core core(body, context, options);
  core.switch_in();
  while (!core.finished()) {
    task<void> request = core.take_request();
    try {
      co_await std::move(request);
    } catch (...) {
      core.fail_request(std::current_exception());
    }
    // Thread-local state on the fiber's stack (errno, cached TLS addresses) pins it to one thread.
    if (home != nullptr && !home->is_current()) co_await switch_to(*home);
    core.switch_in();
  }
  core.rethrow_if_failed();
}

void fiber_await(task<void> request) {
  if (current_core == nullptr) throw_await_outside_fiber();
  current_core->suspend_for(std::move(request));
}

void throw_await_outside_fiber() {
  throw std::logic_error(
      "sluice::runtime::await() called outside a fiber: use co_await in a coroutine, or run the "
      "blocking-style code with run_fiber()");
}

}  // namespace detail

bool in_fiber() noexcept { return detail::current_core != nullptr; }

namespace {
constinit thread_local std::size_t paced_work = 0;
}  // namespace

void pace_point(std::size_t work) {
  paced_work += work;
  if (paced_work < pace_budget) return;
  paced_work = 0;
  if (in_fiber()) await(yield_to_io());
}

namespace bench_support {
namespace {

struct yield_loop {
  std::size_t iterations;
  double* elapsed_ns;
  void operator()() const {
    await(yield());  // warm-up: the first switch in also touches fresh stack pages
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < iterations; ++i) await(yield());
    *elapsed_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  }
};

}  // namespace

double measure_fiber_switch_ns(std::size_t iterations) {
  if (iterations == 0) return 0.0;
  double elapsed_ns = 0.0;
  sync_wait(run_fiber(yield_loop{iterations, &elapsed_ns}));
  return elapsed_ns / static_cast<double>(iterations);
}

}  // namespace bench_support
}  // namespace sluice::runtime
