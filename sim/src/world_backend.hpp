#pragma once
// Private to the world: an executor's simulated backend.

#include <sluice/runtime/admission.hpp>
#include <sluice/sim/world.hpp>

#include <algorithm>
#include <deque>

namespace sluice::sim {

// An executor's backend: submissions go to the world; completions the world decided wait here until
// the executor's next turn dispatches them.
class world::backend final : public runtime::io_backend {
 public:
  // `ring_entries` ordinary operations in flight at most (0: no limit), admitted as io_uring's are.
  backend(world& w, int index, std::size_t ring_entries)
      : admission_(ring_entries == 0 ? runtime::ring_admission::unlimited : ring_entries,
                   ring_entries == 0 ? runtime::ring_admission::unlimited : ring_entries + internal_reserve),
        world_(w),
        index_(index) {}
  // Places above the cap for internal ops, as the io_uring backend keeps (its CQ size less the cap).
  static constexpr std::size_t internal_reserve = 8;
  ~backend() override { std::erase(world_.backends_, this); }

  void submit(runtime::io_op& op) override { world_.submit(*this, op); }
  unsigned poll(bool /*wait*/) override {
    // Never blocks: the world runs other executors instead of waiting.
    unsigned n = 0;
    while (!done_.empty()) {
      runtime::io_op* op = done_.front();
      done_.pop_front();
      ++n;
      op->complete(*op);
    }
    return n;
  }
  std::size_t outstanding() const noexcept override { return in_world_ + done_.size(); }
  bool has_pending_work() const noexcept override { return !done_.empty(); }
  std::size_t capacity() const noexcept override { return admission_.capacity(); }
  clock::time_point now() const noexcept override { return world_.now_; }
  bool virtual_clock() const noexcept override { return true; }
  const char* name() const noexcept override { return "sim"; }

  int index() const noexcept { return index_; }
  void finish(runtime::io_op& op, std::int32_t result) {
    op.result = result;
    done_.push_back(&op);
  }

  std::size_t in_world_ = 0;
  // What is in the ring (pending in the world) and what waits in its backlogs for room.
  runtime::ring_admission admission_;

 private:
  world& world_;
  int index_;
  std::deque<runtime::io_op*> done_;
};

}  // namespace sluice::sim
