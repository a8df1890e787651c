#pragma once
// fiber: run blocking-style code (user operators, legacy daemon code) on its own stack, on the
// current executor. Inside the fiber, `await(x)` suspends only that fiber until `x` completes.
//
// Guarantees:
// - `run_fiber(fn)` is a lazy task like any other: the fiber (and its stack) exists only once the
//   task is awaited. It completes with fn's result, or rethrows what escaped fn.
// - `await(x)` returns x's result or rethrows x's exception inside the fiber. Meanwhile the executor
//   keeps running its other coroutines. `x` is co_awaited by the task that awaits run_fiber, so that
//   task's stop token reaches the awaited operation (a stopped sleep returns false, as in a task).
//   `await(current_stop_token())` yields it inside the fiber.
// - The fiber always resumes on the executor it started on.
// - Destroying a run_fiber task while its fiber is suspended (on the owner executor, and only
//   once what it awaits is no longer in flight, as for any suspended task) unwinds the fiber: the
//   pending `await` throws `detail::fiber_unwind` (not a std::exception), the fiber's destructors
//   run, and its stack is freed. Code on a fiber must let it pass: a `catch (...)` rethrows (if it
//   swallows it, every later `await` throws it again), and a destructor never calls `await` (that
//   would throw out of a destructor: std::terminate).
// - Stacks are fixed-size (`fiber_options::stack_bytes`) with a guard page below: an overflow
//   faults instead of corrupting memory. Don't run an executor loop (sync_wait) on a fiber.
//
//   int legacy_step(conn& c) { return parse(await(c.read_some())); }  // an ordinary function
//   auto t = run_fiber([&c] { return legacy_step(c); });              // a separate statement:
//   int n = co_await std::move(t);               // no lambda in a co_await expression (GCC 12)

#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace sluice::runtime {

struct fiber_options {
  // Usable stack, rounded up to whole pages (one guard page is added below it); raised to Boost's
  // minimum if smaller.
  std::size_t stack_bytes = 256 * 1024;
};

// True while running on a fiber started by run_fiber.
bool in_fiber() noexcept;

// Pacing a long synchronous loop (a keyed operator emitting every key of a large table, a table
// restored from a checkpoint: docs/state.md). Each call adds `work` (about one record's worth) to
// this thread's count; once the count reaches pace_budget, and the caller runs on a fiber, the fiber
// lets the executor run its other coroutines and submit its I/O (await(yield_to_io())) before it
// goes on. Off a fiber it only counts: the loop is as it was. Counting, not the clock, decides, so a
// run is as deterministic as its input.
inline constexpr std::size_t pace_budget = 1024;
void pace_point(std::size_t work = 1);

namespace detail {

// Thrown at a pending `await` when the fiber's task is destroyed; unwinds the fiber's stack.
struct fiber_unwind {};

using fiber_body = void (*)(void* context);

// The non-template core (fiber.cpp): creates the fiber, runs `body(context)` on it, and co_awaits
// each request the fiber hands over until the body returns. Rethrows what escaped the body.
task<void> drive_fiber(fiber_body body, void* context, fiber_options options);

// Called on a fiber: hands `request` to the driver and suspends the fiber until the driver has
// awaited it; rethrows the request's exception. Throws std::logic_error off a fiber.
void fiber_await(task<void> request);
[[noreturn]] void throw_await_outside_fiber();

// fn and its result, reached from the fiber through a void*.
template <class F, class R>
struct fiber_call {
  explicit fiber_call(F* f) noexcept : fn(f) {}
  F* fn;
  std::optional<R> result{};
  static void invoke(void* self) {
    auto* call = static_cast<fiber_call*>(self);
    call->result.emplace(std::invoke(*call->fn));
  }
};
template <class F>
struct fiber_call<F, void> {
  explicit fiber_call(F* f) noexcept : fn(f) {}
  F* fn;
  static void invoke(void* self) { std::invoke(*static_cast<fiber_call*>(self)->fn); }
};

// What `co_await a` would call await_resume on.
template <class A>
decltype(auto) awaiter_of(A&& a) {
  if constexpr (requires { static_cast<A&&>(a).operator co_await(); }) {
    return static_cast<A&&>(a).operator co_await();
  } else if constexpr (requires { operator co_await(static_cast<A&&>(a)); }) {
    return operator co_await(static_cast<A&&>(a));
  } else {
    return static_cast<A&&>(a);
  }
}
template <class A>
using await_result_t = decltype(std::declval<decltype(awaiter_of(std::declval<A>()))&>().await_resume());

// Where the driver leaves an awaited result for the fiber: a value, a reference or nothing.
template <class R>
struct await_slot {
  std::optional<std::remove_cvref_t<R>> value;
  template <class V>
  void set(V&& v) {
    value.emplace(std::forward<V>(v));
  }
  std::remove_cvref_t<R> take() { return std::move(*value); }
};
template <class R>
struct await_slot<R&> {
  R* value = nullptr;
  void set(R& v) noexcept { value = std::addressof(v); }
  R& take() noexcept { return *value; }
};
template <>
struct await_slot<void> {};

// The request a fiber hands to its driver. The awaitable lives on the fiber's stack, which stays
// put while the fiber is suspended, so a pointer to it is enough (and sleeps are not movable).
template <class A, class R>
task<void> await_request(std::remove_reference_t<A>* awaitable, await_slot<R>* out) {
  if constexpr (std::is_void_v<R>) {
    co_await static_cast<A&&>(*awaitable);
  } else {
    out->set(co_await static_cast<A&&>(*awaitable));
  }
}

}  // namespace detail

// Runs `fn()` on its own stack on the current executor; completes with its result.
template <class F>
task<std::invoke_result_t<F>> run_fiber(F fn, fiber_options options = {}) {
  using R = std::invoke_result_t<F>;
  static_assert(!std::is_reference_v<R>, "run_fiber: fn must return a value or void, not a reference");
  detail::fiber_call<F, R> call(&fn);
  co_await detail::drive_fiber(&detail::fiber_call<F, R>::invoke, &call, options);
  if constexpr (!std::is_void_v<R>) co_return std::move(*call.result);
}

// On a fiber: suspends this fiber (only) until `a` completes; returns its result or rethrows.
template <class Awaitable>
decltype(auto) await(Awaitable&& a) {
  if (!in_fiber()) detail::throw_await_outside_fiber();
  using R = detail::await_result_t<Awaitable>;
  detail::await_slot<R> slot;
  detail::fiber_await(detail::await_request<Awaitable, R>(std::addressof(a), &slot));
  if constexpr (!std::is_void_v<R>) return slot.take();
}

namespace bench_support {
// Mean cost in ns of one fiber switch round trip on the real path: the fiber hands
// `await(yield())` to its driver, which co_awaits it (one trip through the run queue) and switches
// back. Runs its own executor (sync_wait), so call it off any executor.
double measure_fiber_switch_ns(std::size_t iterations);
}  // namespace bench_support

}  // namespace sluice::runtime
