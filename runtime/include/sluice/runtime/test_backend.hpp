#pragma once
// test_backend: a deterministic I/O backend for tests. The test decides which operation completes,
// when, and with what result.
//
// - Operations wait in `pending()` in submission order until completed. A test completes one with
//   `complete(op, result)` (injected result) or `perform(op, max_bytes)` (the real syscall, optionally
//   truncated to force a short read/write). Completions are delivered at the executor's next poll,
//   in the order they were made.
// - Auto mode (the default): whenever the executor would block, the oldest operation that can run
//   is performed for real; fault rules may replace its result first. Socket and eventfd operations
//   run only once ready (checked with poll(2)), so nothing blocks. Timers fire only when nothing else
//   can run, in deadline order, advancing a virtual clock: sleeps take no real time.
// - `on_idle`, if set, is called instead of the auto step; it must complete something (or change the
//   world) or the executor waits for other threads. With auto mode off and no on_idle, nothing is
//   performed while the executor has other work, but a blocked executor still performs the oldest
//   runnable operation.
// - A cancel removes a still-pending target (-ECANCELED) and completes with 0, or with -ENOENT if
//   the target already completed: the cancel's completion is never the target's.
// - Admission is io_uring's (admission.hpp): with set_capacity(n), at most n ordinary operations
//   are pending, of which at most wait_capacity_for(n) waits, with an internal reserve of 8 above
//   them (which prompt ops may borrow but for 2 places); the others wait in their class's backlog,
//   where nothing performs or completes them, and enter `pending()` in FIFO order as places free
//   up. A cancel of a backlogged op takes it out (-ECANCELED). The default capacity is large enough
//   never to matter.

#include <sluice/runtime/admission.hpp>
#include <sluice/runtime/io_backend.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

namespace sluice::runtime {

class test_backend final : public io_backend {
 public:
  // Returns a result to inject for `op` (negative errno: not performed; a byte count >= 0 for a
  // read/write/send/recv: performed for real, truncated to that many bytes), or nullopt.
  using fault_rule = std::function<std::optional<std::int32_t>(const io_op& op)>;

  test_backend();

  void submit(io_op& op) override;
  unsigned poll(bool wait) override;
  std::size_t outstanding() const noexcept override {
    return pending_.size() + completed_.size() + admission_.backlog_size();
  }
  bool has_pending_work() const noexcept override { return !completed_.empty() || (auto_ && !pending_.empty()); }
  std::size_t capacity() const noexcept override { return admission_.capacity(); }
  std::chrono::steady_clock::time_point now() const noexcept override { return now_; }
  bool virtual_clock() const noexcept override { return true; }
  const char* name() const noexcept override { return "test"; }

  // --- what a test uses -------------------------------------------------------------------------
  const std::deque<io_op*>& pending() const noexcept { return pending_; }
  // Caps the ring at `ordinary_ops` in flight, plus `internal_reserve` places above them
  // (admission.hpp; the io_uring backend keeps 8). Only while nothing is outstanding but the
  // executor's wake-up read.
  void set_capacity(std::size_t ordinary_ops, std::size_t internal_reserve = 8);
  const ring_admission& admission() const noexcept { return admission_; }
  // Whether `op` waits in a backlog (submitted, not admitted yet).
  bool backlogged(const io_op& op) const noexcept;
  // The oldest pending op with this code (and fd, if given), or null.
  io_op* find(op_code code, int fd = -1) const noexcept;
  void complete(io_op& op, std::int32_t result);
  // Runs the real syscall for `op` (at most max_bytes for data ops) and completes it.
  void perform(io_op& op, std::optional<std::uint32_t> max_bytes = std::nullopt);
  void set_auto(bool on) noexcept { auto_ = on; }
  // When true, a cancel arrives "too late": it completes with -EALREADY and its target stays pending
  // (and later completes with its real result), as happens when the kernel is already running it.
  void set_cancel_too_late(bool on) noexcept { cancel_too_late_ = on; }
  void add_fault(fault_rule rule) { faults_.push_back(std::move(rule)); }
  void clear_faults() noexcept { faults_.clear(); }
  void advance(std::chrono::nanoseconds by) noexcept { now_ += by; }
  std::function<void(test_backend&)> on_idle;

  // Counters, for assertions.
  std::uint64_t submitted(op_code code) const noexcept { return submitted_[static_cast<int>(code)]; }
  std::uint64_t performed(op_code code) const noexcept { return performed_[static_cast<int>(code)]; }

 private:
  void take(io_op& op);
  void admit_backlog();
  bool auto_step(bool may_block);
  bool is_ready(const io_op& op) const;
  std::int32_t run_syscall(io_op& op, std::uint32_t len);

  ring_admission admission_{1u << 20};
  std::deque<io_op*> pending_;
  std::deque<io_op*> completed_;
  std::vector<fault_rule> faults_;
  std::chrono::steady_clock::time_point now_;
  bool auto_ = true;
  bool cancel_too_late_ = false;
  std::uint64_t submitted_[op_code_count] = {};
  std::uint64_t performed_[op_code_count] = {};
};

}  // namespace sluice::runtime
