// The executor run loop, the inbox wake-up protocol and stoppable waits (see executor.hpp).

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/offload.hpp>
#include <sluice/runtime/simulation.hpp>

#include "thread_beat.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SLUICE_CPU_RELAX() _mm_pause()
#else
#define SLUICE_CPU_RELAX() ((void)0)
#endif

namespace sluice::runtime {

namespace detail {
void log_posted_failure(const char* what) noexcept { log::error("posted function failed: {}", what); }

thread_beat& this_thread_beat() noexcept {
  static thread_local thread_beat mine{.tid = static_cast<int>(::gettid())};
  return mine;
}

void nested_resume() noexcept {
  log::error("a coroutine was resumed inline, from inside a running coroutine, message or completion: waiters "
             "must be scheduled, never resumed by what wakes them (invariant 3)");
  log::flush();
  std::abort();
}
}  // namespace detail

executor::executor(executor_options options)
    : id_(options.id),
      batch_limit_(options.batch_limit == 0 ? 1 : options.batch_limit),
      order_(options.order),
      blocking_(options.blocking),
      spin_(options.spin_before_sleep),
      backend_(options.backend ? std::move(options.backend) : make_backend(options.uring)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "executor: eventfd");
  stop_node_.owner = this;
  stop_node_.run = [](detail::inbox_node* self) noexcept {
    static_cast<stop_message*>(self)->owner->stop_now();
  };
  executor* previous = std::exchange(current_, this);
  arm_wake();
  current_ = previous;
}

blocking_pool& executor::blocking() const noexcept {
  return blocking_ != nullptr ? *blocking_ : default_blocking_pool();
}

executor::~executor() {
  shutdown();
  // A producer's message can run, and lead to this destruction, before the producer has left
  // post_node (it still reads sleeping_ and may write wake_fd_): wait for it. It is past its push
  // and needs at most one eventfd write, so this waits for microseconds, not for work.
  while (producers_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  ::close(wake_fd_);
}

void executor::arm_wake() {
  wake_op_ = io_op{};
  wake_op_.code = op_code::read;
  wake_op_.fd = wake_fd_;
  wake_op_.buf = &wake_buf_;
  wake_op_.len = sizeof wake_buf_;
  wake_op_.offset = static_cast<std::uint64_t>(-1);
  wake_op_.user = this;
  wake_op_.complete = &executor::on_wake;
  wake_op_.internal = true;
  wake_armed_ = true;
  backend_->submit(wake_op_);
}

void executor::on_wake(io_op& op) noexcept {
  auto* ex = static_cast<executor*>(op.user);
  ex->wake_armed_ = false;
  if (op.result < 0 && op.result != -ECANCELED && op.result != -EINTR && op.result != -EAGAIN) {
    log::error("executor {}: wake-up read failed: {}", ex->id_, std::strerror(-op.result));
  }
  if (!ex->shut_down_) ex->arm_wake();
}

// Lifetime: once the push below has published `node`, the owner may run it, and what it does may
// end with this executor destroyed, while we still read sleeping_ and write wake_fd_. So a producer
// counts itself in producers_ before the push (that increment happens-before the owner runs the
// message, and so before its destruction) and out after its last access; ~executor waits for zero.
// Wake-up: the push (a seq_cst exchange) and the seq_cst load of sleeping_ pair with the owner's
// seq_cst store of sleeping_ and load of the inbox head (wait_for_work): one of the two sides sees
// the other's write, so either the owner finds the message or we find it asleep. The fast path
// (owner busy) is three atomic read-modify-writes on two cache lines and no syscall.
void executor::post_node(detail::inbox_node* node) noexcept {
  producers_.fetch_add(1, std::memory_order_relaxed);
  inbox_.push(node);
  if (sleeping_.load(std::memory_order_seq_cst) && sleeping_.exchange(false, std::memory_order_acq_rel)) {
    wakeups_sent_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t one = 1;
    while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
  producers_.fetch_sub(1, std::memory_order_release);
}

void executor::request_stop() noexcept {
  if (is_current()) {
    stop_now();
  } else if (!stop_posted_.exchange(true)) {
    // Stop callbacks then run on the owner thread, where the waits they cancel live.
    post_node(&stop_node_);
  }
}

std::size_t executor::drain_inbox(std::size_t limit) {
  detail::thread_beat& beat = detail::this_thread_beat();
  std::size_t n = 0;
  while (n < limit) {
    detail::inbox_node* node = inbox_.pop();
    if (node == nullptr) break;
    beat.doing(detail::thread_beat::activity::message, reinterpret_cast<const void*>(node->run));
    node->run(node);
    ++n;
  }
  return n;
}

void executor::turn(bool may_wait) {
  detail::thread_beat& beat = detail::this_thread_beat();  // (the stall detector's view)
  beat.turn();
  // Everything a turn runs (messages, completions, coroutines) runs as this executor.
  executor* const previous = std::exchange(current_, this);
  // Messages and completions only schedule coroutines (invariant 3): no resume from inside them.
  const bool outer = std::exchange(detail::dispatching, true);
  // A turn that handled messages does not block: they may have satisfied the caller's condition.
  const bool had_messages = drain_inbox(batch_limit_) > 0;
  if (had_messages) recent_inbox_traffic_ = true;
  const bool io_waiting = backend_->has_pending_work() || backend_->outstanding() > (wake_armed_ ? 1u : 0u);
  beat.doing(detail::thread_beat::activity::completions, backend_.get());
  if (!ready_.empty() || !deferred_.empty() || !may_wait || had_messages) {
    if (io_waiting) backend_->poll(false);
  } else {
    wait_for_work(io_waiting);
    if (drain_inbox(batch_limit_) > 0) recent_inbox_traffic_ = true;
  }
  while (!deferred_.empty()) ready_.push(deferred_.pop());
  detail::dispatching = outer;
  for (unsigned i = 0; i < batch_limit_ && !ready_.empty(); ++i) {
    if (order_ != nullptr && ready_.size() > 1) ready_.to_front(order_->pick_ready(ready_.size()));
    const std::coroutine_handle<> h = ready_.pop();
    // A coroutine frame begins with its resume function's address (the GCC and Clang ABI).
    beat.doing(detail::thread_beat::activity::coroutine, *static_cast<void* const*>(h.address()));
    detail::resume(h);
  }
  current_ = previous;
}

void executor::wait_for_work(bool io_waiting) {
  // After recent cross-thread traffic, spin briefly on the inbox first: a reply is likely soon and
  // waking from the ring costs microseconds. How long is learnt (spin_policy): a spin that finds
  // nothing, as on an oversubscribed machine, shortens the next ones down to none. The re-armed
  // wake-up read counts as pending work until it is submitted, so submit first and look again.
  const std::chrono::nanoseconds spin = recent_inbox_traffic_ ? spin_.next() : std::chrono::nanoseconds{0};
  if (spin.count() > 0 && io_waiting) {
    backend_->poll(false);
    io_waiting = backend_->has_pending_work() || backend_->outstanding() > (wake_armed_ ? 1u : 0u);
    if (!ready_.empty()) return;
  }
  if (spin.count() > 0 && !io_waiting) {
    recent_inbox_traffic_ = false;
    const auto until = std::chrono::steady_clock::now() + spin;
    bool paid_off = false;
    do {
      for (int i = 0; i < 8; ++i) SLUICE_CPU_RELAX();
      paid_off = inbox_.maybe_nonempty();
    } while (!paid_off && std::chrono::steady_clock::now() < until);
    spin_.record(paid_off);
    if (paid_off) return;
  }
  sleeping_.store(true, std::memory_order_seq_cst);
  if (inbox_.maybe_nonempty()) {
    sleeping_.store(false, std::memory_order_relaxed);
    if (io_waiting) backend_->poll(false);
    return;
  }
  detail::thread_beat& beat = detail::this_thread_beat();
  beat.waiting();  // in the kernel, waiting for work: not a stall
  backend_->poll(true);
  beat.woke();
  sleeping_.store(false, std::memory_order_relaxed);
}

void executor::run_until(bool (*done)(void*), void* context) {
  executor* previous = std::exchange(current_, this);
  while (!done(context)) turn(true);
  current_ = previous;
}

void executor::run() {
  run_until(
      [](void* self) noexcept {
        auto* ex = static_cast<executor*>(self);
        return ex->stop_requested() && ex->detached_ == 0;
      },
      this);
}

void executor::drain() {
  executor* previous = std::exchange(current_, this);
  stop_now();
  // Detached tasks see the stop through their token and finish; their I/O is cancelled.
  auto last_report = std::chrono::steady_clock::now();
  while (detached_ > 0 || !ready_.empty() || !deferred_.empty() || backend_->outstanding() > (wake_armed_ ? 1u : 0u) ||
         inbox_.maybe_nonempty()) {
    turn(true);
    if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(5)) {
      last_report = std::chrono::steady_clock::now();
      log::warn("executor {}: shutdown waits for {} detached task(s) and {} operation(s)", id_, detached_,
                backend_->outstanding());
    }
  }
  current_ = previous;
}

void executor::shutdown() {
  if (shut_down_) return;
  drain();
  executor* previous = std::exchange(current_, this);
  shut_down_ = true;
  if (wake_armed_) {
    io_op cancel{};
    cancel.code = op_code::cancel;
    cancel.target = &wake_op_;
    cancel.complete = [](io_op&) noexcept {};
    cancel.internal = true;
    backend_->submit(cancel);
    // If the cancel loses the race, the read still ends: give it something to read.
    std::uint64_t one = 1;
    while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
    while (backend_->outstanding() > 0) backend_->poll(true);
  }
  current_ = previous;
}

// --- the executor's own stop ------------------------------------------------------------------

void executor::stop_now() noexcept {
  assert(is_current());
  stop_source_.request_stop();  // on this thread: stop_relay_'s callback cancels its waits inline
}

// --- detached tasks ----------------------------------------------------------------------------

executor::root_task executor::run_detached(task<void> t, executor* ex) {
  try {
    co_await std::move(t);
  } catch (const std::exception& e) {
    log::error("executor {}: detached task failed: {}", ex->id_, e.what());
  } catch (...) {
    log::error("executor {}: detached task failed with a non-standard exception", ex->id_);
  }
  // The task may have ended on another executor (switch_to): come home before touching our state.
  if (!ex->is_current()) co_await switch_to(*ex);
  --ex->detached_;
}

void executor::start_root(root_task&& root) {
  root.handle.promise().set_stop_relay(&stop_relay_);
  schedule(root.handle);
}

void executor::spawn(task<void> t) {
  assert(is_current() && "executor::spawn off the owning executor; use spawn_on");
  ++detached_;
  start_root(run_detached(std::move(t), this));
}

void spawn_on(executor& ex, task<void> t) {
  if (ex.is_current()) {
    ex.spawn(std::move(t));
    return;
  }
  ex.post([&ex, t = std::move(t)]() mutable { ex.spawn(std::move(t)); });
}

// --- stoppable waits ---------------------------------------------------------------------------

namespace detail {

void stoppable_wait::arm(std::coroutine_handle<> waiter, stop_relay* relay) {
  owner_ = executor::current();
  assert(owner_ && "awaiting an operation off an executor");
  waiter_ = waiter;
  run = &stoppable_wait::on_message;
  if (relay == nullptr) return;
  if (relay->home() == owner_) {
    if (relay->stop_requested()) {
      stop_requested();
    } else {
      relay->link(this);
    }
  } else if (relay->token().stop_possible()) {
    // Off the relay's home (a child that switched executors): a callback of its own.
    callback_.emplace(relay->token(), on_stop{this});
  }
}

void stoppable_wait::stop_requested() noexcept {
  if (owner_->is_current()) {
    if (!finished_ && !stop_seen_) {
      stop_seen_ = true;
      cancel_on_owner();
    }
    return;
  }
  posted_.store(true, std::memory_order_release);
  owner_->post_node(this);
}

void stoppable_wait::on_message(inbox_node* self) noexcept {
  auto* w = static_cast<stoppable_wait*>(self);
  w->message_handled_ = true;
  if (!w->finished_ && !w->stop_seen_) {
    w->stop_seen_ = true;
    w->hold();
    w->cancel_on_owner();
    w->release();
    return;
  }
  // The target finished first and kept the waiter suspended for this message.
  w->release();
}

void stoppable_wait::finish_target() noexcept {
  finished_ = true;
  if (relay_ != nullptr) {
    // A stop requested before this finish counts as seen even if the relay has not walked yet, as
    // it would with a callback of our own (an fd that arrives then is closed, io_awaitable.cpp).
    if (relay_->stop_requested()) stop_seen_ = true;
    relay_->unlink(this);
  }
  // Waits for a stop callback running concurrently on another thread; afterwards posted_ is final.
  callback_.reset();
  if (posted_.load(std::memory_order_acquire)) {
    stop_seen_ = true;
    if (!message_handled_) ++pending_;
  }
}

// --- stop relays ------------------------------------------------------------------------------

void stop_relay::stop_fired() noexcept {
  if (home_->is_current()) {
    cancel_all();
    return;
  }
  posted_.store(true, std::memory_order_release);
  run = &stop_relay::on_message;
  home_->post_node(this);
}

void stop_relay::on_message(inbox_node* self) noexcept {
  auto* r = static_cast<stop_relay*>(self);
  r->ran_ = true;
  r->cancel_all();
  if (r->quiet_waiter_) {
    r->posted_.store(false, std::memory_order_relaxed);
    r->ran_ = false;
    r->home_->schedule(std::exchange(r->quiet_waiter_, {}));
  }
}

void stop_relay::cancel_all() noexcept {
  while (stoppable_wait* w = head_) {
    unlink(w);
    w->stop_seen_ = true;
    w->cancel_on_owner();
  }
}

void stoppable_wait::release() noexcept {
  assert(pending_ > 0);
  if (--pending_ == 0) owner_->schedule(waiter_);
}

void stoppable_wait::release_inline() noexcept {
  assert(pending_ > 0);
  if (--pending_ == 0) detail::resume(waiter_);
}

}  // namespace detail
}  // namespace sluice::runtime
