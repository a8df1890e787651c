#pragma once
// The executor's run queue: a FIFO ring of coroutine handles that doubles when full. It is bounded
// by the number of live coroutines on the executor (each is queued at most once at a time).

#include <coroutine>
#include <cstddef>
#include <memory>
#include <utility>

namespace sluice::runtime::detail {

class ready_queue {
 public:
  ready_queue() : slots_(std::make_unique<std::coroutine_handle<>[]>(1024)), mask_(1023) {}

  bool empty() const noexcept { return head_ == tail_; }
  std::size_t size() const noexcept { return tail_ - head_; }

  void push(std::coroutine_handle<> h) {
    if (tail_ - head_ == mask_ + 1) grow();
    slots_[tail_++ & mask_] = h;
  }
  std::coroutine_handle<> pop() noexcept { return slots_[head_++ & mask_]; }
  // Swaps the i-th oldest (i < size()) with the oldest, which pop() takes next.
  void to_front(std::size_t i) noexcept {
    std::swap(slots_[head_ & mask_], slots_[(head_ + i) & mask_]);
  }

 private:
  void grow() {
    const std::size_t capacity = mask_ + 1;
    auto bigger = std::make_unique<std::coroutine_handle<>[]>(capacity * 2);
    for (std::size_t i = 0; i < capacity; ++i) bigger[i] = slots_[(head_ + i) & mask_];
    slots_ = std::move(bigger);
    head_ = 0;
    tail_ = capacity;
    mask_ = capacity * 2 - 1;
  }

  std::unique_ptr<std::coroutine_handle<>[]> slots_;
  std::size_t mask_;
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
};

}  // namespace sluice::runtime::detail
