#pragma once
// Ring admission: which submitted operations an executor's ring takes in now, and in what order the
// others follow. Every backend (io_uring, the test backend, the simulated world) admits through
// this one class, so a simulation tests the rule production runs.
//
// The rule: an executor always keeps room for operations that end by themselves, whatever its
// peers do.
// - A *wait* is an operation whose end a peer decides: recv, accept, connect, and any op marked
//   `io_op::waits` (a read of a signalfd or a pipe). Thousands of idle connections each keep a
//   recv in flight for as long as their peers stay silent.
// - A *prompt* operation ends on its own in bounded time: file I/O, fsync, openat, close, rename,
//   mkdir, unlink, statx, send, shutdown, nop.
// - A *timer* (timeout) takes no place at all: the backend keeps timers itself (the io_uring
//   backend in a deadline heap, waking at the earliest; the simulation and the test backend on
//   their clocks), so a checkpoint's timeout never queues behind recvs and a thousand pending
//   sleeps cost no ring entry.
// - *Internal* operations (the executor's wake-up read, cancels) have a reserve of their own above
//   the cap, so a full ring can still be woken and can still cancel.
// Limits: at most `capacity` ordinary (prompt + wait) operations are in flight, and of those at most
// `wait_capacity` waits (wait_capacity_for: capacity less an eighth, and at least one less), so at
// least capacity - wait_capacity places are always left to prompt operations. Everything in flight
// stays below `total_limit` (the io_uring backend's CQ size), so the CQ cannot overflow. Above the
// cap is the internal reserve: internal ops use it, and so may prompt ones, but for its last
// `internal_floor` places. A reserve place a prompt op takes comes back by itself; a wait never
// takes one. So a ring full of waits still has the reserve for its wake-up read and cancels, and
// prompt operations get more than capacity - wait_capacity places when waits hold their share
// (which matters for small rings: 8 places leave 1 to prompt ops without it).
// Each class has its own FIFO backlog: an operation enters once its class's backlog is empty and
// its class has room; a prompt one never waits behind a wait, and within a class order is kept.
// When places free up, the internal backlog goes first, then the prompt one, then the waits.
//
// A wait can still wait behind other waits: more waits than wait_capacity at once queue in their
// backlog until one of those in flight ends. That bounds what peers can take; it does not make
// admission fair among them, and a job whose executor needs more waits at once than its share
// (a recv per connection, an accept per listener) can stall on a queued one.

#include <sluice/runtime/io_backend.hpp>

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace sluice::runtime {

enum class op_class : std::uint8_t { internal, prompt, wait, timer };
inline constexpr int op_class_count = 4;

constexpr op_class class_of(const io_op& op) noexcept {
  if (op.internal) return op_class::internal;
  if (op.waits) return op_class::wait;
  switch (op.code) {
    case op_code::timeout: return op_class::timer;
    case op_code::recv:
    case op_code::poll:
    case op_code::accept:
    case op_code::connect: return op_class::wait;
    default: return op_class::prompt;
  }
}

const char* to_string(op_class c) noexcept;

// Of `capacity` ordinary places, how many waits may hold: capacity - max(1, capacity / 8), but at
// least 1 (for capacity >= 2). "No limit" (the max size_t) stays no limit.
constexpr std::size_t wait_capacity_for(std::size_t capacity) noexcept {
  if (capacity == std::numeric_limits<std::size_t>::max()) return capacity;
  if (capacity < 2) return capacity;
  const std::size_t reserve = capacity / 8 > 1 ? capacity / 8 : 1;
  return capacity - reserve;
}

namespace detail {

// An intrusive FIFO of operations (through io_op::next_).
class op_queue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  io_op* front() const noexcept { return head_; }
  std::size_t size() const noexcept { return size_; }
  void push(io_op& op) noexcept {
    op.next_ = nullptr;
    if (tail_) tail_->next_ = &op; else head_ = &op;
    tail_ = &op;
    ++size_;
  }
  io_op* pop() noexcept {
    io_op* op = head_;
    head_ = op->next_;
    if (head_ == nullptr) tail_ = nullptr;
    op->next_ = nullptr;
    --size_;
    return op;
  }
  // Takes `target` out if it is queued.
  bool remove(const io_op* target) noexcept;
  template <class F>
  void for_each(F&& f) const {
    for (io_op* op = head_; op != nullptr; op = op->next_) f(*op);
  }

 private:
  io_op* head_ = nullptr;
  io_op* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace detail

class ring_admission {
 public:
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();
  // Places above the cap that prompt operations never take (the wake-up read, a cancel).
  static constexpr std::size_t internal_floor = 2;

  // `capacity` ordinary operations in flight (unlimited: no cap), of which wait_capacity_for(capacity)
  // waits; internal ones, and prompt ones beyond the cap, while everything in flight stays below
  // `total_limit` (prompt ones: below total_limit - internal_floor).
  explicit ring_admission(std::size_t capacity = unlimited, std::size_t total_limit = unlimited) noexcept;

  // New limits; what is in flight and backlogged stays (what is over a new limit stays in flight).
  void set_limits(std::size_t capacity, std::size_t total_limit = unlimited) noexcept;

  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t wait_capacity() const noexcept { return wait_capacity_; }

  // Whether `op` may enter the ring now: its class's backlog is empty and its class has room.
  bool may_enter(const io_op& op) const noexcept;
  // Whether an op of `op`'s class has room (its backlog aside).
  bool has_room(const io_op& op) const noexcept;
  // `op` entered the ring / left it (completed, or cancelled out of it).
  void entered(const io_op& op) noexcept;
  void left(const io_op& op) noexcept;

  // Queues `op` at the back of its class's backlog.
  void defer(io_op& op) noexcept { backlog_[index(class_of(op))].push(op); }
  // The first backlogged op that has room now (internal first, then prompt, then wait), or null.
  // The caller takes it out with take(op) once it could hand it to the kernel (before entered()).
  io_op* next() const noexcept;
  void take(io_op& op) noexcept;
  // Takes `op` out of its backlog (a cancel that finds its target still waiting there).
  bool remove(const io_op* op) noexcept { return backlog_[index(class_of(*op))].remove(op); }

  bool backlogged() const noexcept;
  std::size_t backlog_size() const noexcept;
  std::size_t in_flight(op_class c) const noexcept { return in_flight_[index(c)]; }
  std::size_t in_flight() const noexcept;
  // Every backlogged op, class by class (internal, prompt, wait), each in its order.
  template <class F>
  void for_each_backlogged(F&& f) const {
    for (const auto& queue : backlog_) queue.for_each(f);
  }

 private:
  static constexpr int index(op_class c) noexcept { return static_cast<int>(c); }
  bool has_room(op_class c) const noexcept;

  std::size_t capacity_ = 0;
  std::size_t wait_capacity_ = 0;
  std::size_t total_limit_ = 0;
  std::size_t in_flight_[op_class_count] = {};
  std::size_t in_ring_ = 0;   // all but timers
  std::size_t ordinary_ = 0;  // prompt + wait
  detail::op_queue backlog_[op_class_count];
};

// On every submission and completion: inline.
inline bool ring_admission::has_room(op_class c) const noexcept {
  switch (c) {
    case op_class::timer: return true;
    case op_class::internal: return in_ring_ < total_limit_;
    case op_class::prompt:
      // Beyond the cap into the internal reserve, but for its last internal_floor places.
      return in_ring_ < total_limit_ && (ordinary_ < capacity_ || in_ring_ + internal_floor < total_limit_);
    case op_class::wait:
      return in_ring_ < total_limit_ && ordinary_ < capacity_ && in_flight_[index(op_class::wait)] < wait_capacity_;
  }
  return false;
}

inline bool ring_admission::has_room(const io_op& op) const noexcept { return has_room(class_of(op)); }

inline bool ring_admission::may_enter(const io_op& op) const noexcept {
  const op_class c = class_of(op);
  return backlog_[index(c)].empty() && has_room(c);
}

inline void ring_admission::entered(const io_op& op) noexcept {
  const op_class c = class_of(op);
  ++in_flight_[index(c)];
  if (c == op_class::timer) return;
  ++in_ring_;
  if (c != op_class::internal) ++ordinary_;
}

inline void ring_admission::left(const io_op& op) noexcept {
  const op_class c = class_of(op);
  std::size_t& n = in_flight_[index(c)];
  assert(n > 0 && "an operation left the ring that never entered it");
  --n;
  if (c == op_class::timer) return;
  --in_ring_;
  if (c != op_class::internal) --ordinary_;
}

}  // namespace sluice::runtime
