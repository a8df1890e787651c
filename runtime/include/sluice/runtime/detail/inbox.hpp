#pragma once
// The executor inbox: an intrusive, lock-free multi-producer single-consumer queue (Vyukov's).
// Producers on any thread push with one atomic exchange; only the owning executor pops. A pop can
// transiently see nothing while a producer is between its two steps; the consumer then tries again
// on its next loop turn (it does not sleep, because `maybe_nonempty` still says yes).

#include <atomic>

namespace sluice::runtime::detail {

struct inbox_node {
  std::atomic<inbox_node*> next{nullptr};
  void (*run)(inbox_node* self) noexcept = nullptr;
};

class mpsc_inbox {
 public:
  mpsc_inbox() noexcept : head_(&stub_), tail_(&stub_) {}
  mpsc_inbox(const mpsc_inbox&) = delete;
  mpsc_inbox& operator=(const mpsc_inbox&) = delete;

  // Any thread. The exchange is seq_cst so that it pairs with the sleeping flag without a fence
  // (see executor.cpp); on x86 and on ARMv8.1 it is the same instruction as acq_rel.
  void push(inbox_node* node) noexcept {
    node->next.store(nullptr, std::memory_order_relaxed);
    inbox_node* prev = head_.exchange(node, std::memory_order_seq_cst);
    prev->next.store(node, std::memory_order_release);
  }

  // Owner only. Returns nullptr when empty (or when a push is half-way).
  inbox_node* pop() noexcept {
    inbox_node* tail = tail_;
    inbox_node* next = tail->next.load(std::memory_order_acquire);
    if (tail == &stub_) {
      if (next == nullptr) return nullptr;
      tail_ = next;
      tail = next;
      next = next->next.load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    if (tail != head_.load(std::memory_order_acquire)) return nullptr;
    push(&stub_);
    next = tail->next.load(std::memory_order_acquire);
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    return nullptr;
  }

  // Owner only: messages pushed and not yet popped, counted up to `limit` (a push half-way is not
  // counted yet). Walks the queue: for metrics, never on a hot path.
  std::size_t pending(std::size_t limit) const noexcept {
    std::size_t n = 0;
    for (const inbox_node* node = tail_; node != nullptr && n < limit;
         node = node->next.load(std::memory_order_acquire)) {
      if (node != &stub_) ++n;
    }
    return n;
  }

  // Owner only; seq_cst so that it pairs with the sleeping flag (see executor.cpp).
  bool maybe_nonempty() const noexcept {
    return tail_ != &stub_ || head_.load(std::memory_order_seq_cst) != &stub_ ||
           stub_.next.load(std::memory_order_seq_cst) != nullptr;
  }

 private:
  alignas(64) std::atomic<inbox_node*> head_;
  alignas(64) inbox_node* tail_;
  inbox_node stub_;
};

}  // namespace sluice::runtime::detail
