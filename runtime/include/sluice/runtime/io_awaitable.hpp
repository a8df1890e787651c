#pragma once
// io_awaitable: one backend operation awaited by a coroutine, cancellable through the awaiting
// task's stop token.
//
// Cancellation, in the three cases that matter:
// - stop requested before submission: the op is never submitted; the result is -ECANCELED.
// - stop requested while in flight: an ASYNC_CANCEL op is submitted; the awaiter resumes only after
//   the target's own completion AND the cancel's completion (so the op's memory is never reused
//   while the kernel may still write to it). The result is whatever the target reported.
// - stop requested after completion: nothing happens.
// For ops that yield a file descriptor (accept, openat), an fd that arrives after a cancel was
// requested is closed and the result becomes -ECANCELED, so no descriptor leaks.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/io_backend.hpp>

#include <cerrno>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

namespace sluice::runtime {

static_assert(std::is_trivially_destructible_v<io_op>);

class io_awaitable : public detail::stoppable_wait {
 public:
  explicit io_awaitable(const io_op& op, bool yields_fd = false) noexcept : op_(op), yields_fd_(yields_fd) {}
  // The op made in place: `make()` returns it straight into the awaitable (guaranteed elision), so
  // no temporary io_op is zeroed, filled and copied in (which stalled the nop benchmark's loop on
  // its loads of what it had just stored).
  template <class Make>
    requires std::is_nothrow_invocable_r_v<io_op, Make&>
  explicit io_awaitable(Make&& make, bool yields_fd = false) noexcept : op_(make()), yields_fd_(yields_fd) {}

  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) {
    return start(h, detail::stop_token_of(h));
  }
  // >= 0 on success, -errno on failure (-ECANCELED when cancelled before it could run).
  std::int32_t await_resume() const noexcept { return op_.result; }

 protected:
  bool start(std::coroutine_handle<> h, detail::stop_relay* relay);
  io_op op_;

 private:
  void cancel_on_owner() noexcept override;
  static void on_complete(io_op& op) noexcept;
  static void on_cancel_complete(io_op& op) noexcept;

  // Constructed only when a cancel is issued: zeroing a second io_op on every operation showed up
  // in the nop benchmark. io_op is trivially destructible, so it is never destroyed explicitly.
  alignas(io_op) unsigned char cancel_storage_[sizeof(io_op)];
  bool yields_fd_;
};

// Submits one operation and awaits its raw result. The building block of io/ and of timers. On
// a hot path, pass a function that returns the op (`submit_op([&]() noexcept { return
// data_op(...); })`): it is then made in place, not copied in.
inline io_awaitable submit_op(const io_op& op, bool yields_fd = false) noexcept { return io_awaitable{op, yields_fd}; }
template <class Make>
  requires std::is_nothrow_invocable_r_v<io_op, Make&>
inline io_awaitable submit_op(Make&& make, bool yields_fd = false) noexcept {
  return io_awaitable{std::forward<Make>(make), yields_fd};
}

// An operation that the awaiting task's stop request does not cancel: it is always submitted and
// runs to its end. For what must happen even while a task stops, and ends by itself (a close: one
// that never ran would leave the descriptor to a synchronous close on the executor).
class unstoppable_io_awaitable : public io_awaitable {
 public:
  using io_awaitable::io_awaitable;
  bool await_suspend(std::coroutine_handle<> h) { return start(h, nullptr); }
};
inline unstoppable_io_awaitable submit_unstoppable(const io_op& op) noexcept { return unstoppable_io_awaitable{op}; }

}  // namespace sluice::runtime
