#pragma once
// timer_heap: the io_uring backend's pending timeouts, earliest deadline first (a binary min-heap
// of io_op*, each op knowing its position through io_op::heap_index_). Timers never take a place in
// the ring: the backend waits for completions at most until the earliest deadline and completes the
// expired ones itself (admission.hpp: a clock's operations cost no ring place).

#include <sluice/runtime/io_backend.hpp>

#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace sluice::runtime::detail {

class timer_heap {
 public:
  bool empty() const noexcept { return heap_.empty(); }
  std::size_t size() const noexcept { return heap_.size(); }
  io_op& earliest() const noexcept { return *heap_.front(); }

  void push(io_op& op) {
    assert(heap_.size() < std::numeric_limits<std::uint32_t>::max());  // in-flight ops are capped far below
    heap_.push_back(&op);
    op.heap_index_ = static_cast<std::uint32_t>(heap_.size() - 1);
    up(op.heap_index_);
  }
  bool contains(const io_op* op) const noexcept {
    return op != nullptr && op->heap_index_ < heap_.size() && heap_[op->heap_index_] == op;
  }
  // Takes `op` out (it must be contained).
  void remove(io_op& op) noexcept {
    assert(contains(&op));
    const std::size_t at = op.heap_index_;
    const std::size_t last = heap_.size() - 1;
    if (at != last) {
      place(at, heap_[last]);
      heap_.pop_back();
      down(at);
      up(at);
    } else {
      heap_.pop_back();
    }
  }
  io_op& pop() noexcept {
    io_op& op = earliest();
    remove(op);
    return op;
  }

 private:
  bool before(std::size_t a, std::size_t b) const noexcept { return heap_[a]->deadline < heap_[b]->deadline; }
  void place(std::size_t at, io_op* op) noexcept {
    heap_[at] = op;
    op->heap_index_ = static_cast<std::uint32_t>(at);
  }
  void swap_at(std::size_t a, std::size_t b) noexcept {
    io_op* first = heap_[a];
    place(a, heap_[b]);
    place(b, first);
  }
  void up(std::size_t at) noexcept {
    while (at > 0) {
      const std::size_t parent = (at - 1) / 2;
      if (!before(at, parent)) return;
      swap_at(at, parent);
      at = parent;
    }
  }
  void down(std::size_t at) noexcept {
    for (;;) {
      const std::size_t left = 2 * at + 1;
      if (left >= heap_.size()) return;
      std::size_t child = left;
      if (left + 1 < heap_.size() && before(left + 1, left)) child = left + 1;
      if (!before(child, at)) return;
      swap_at(at, child);
      at = child;
    }
  }

  std::vector<io_op*> heap_;
};

}  // namespace sluice::runtime::detail
