#include <sluice/buffers/segment.hpp>
#include <sluice/runtime/assert.hpp>

#include <fmt/core.h>

#include <cassert>
#include <new>

#include <sys/mman.h>
#include <stdexcept>

namespace sluice::buffers {

segment_pool::segment_pool(std::byte* base, std::size_t segment_bytes, std::uint32_t first_index,
                           std::uint32_t segments)
    : base_(base), segment_bytes_(segment_bytes), first_index_(first_index), segments_(segments), taken_(segments, 0) {
  free_.reserve(segments);
  // Stack order: slot 0 is taken first.
  for (std::uint32_t slot = segments; slot > 0; --slot) free_.push_back(slot - 1);
}

void segment_pool::check_owner() noexcept {
  auto* here = runtime::executor::current();
  if (owner_ == nullptr) owner_ = here;
  SLUICE_ASSERT(owner_ == here, "segment_pool used off its owning executor");
}

std::byte* segment_pool::take() noexcept {
  check_owner();
  if (free_.empty()) return nullptr;
  const std::uint32_t slot = free_.back();
  free_.pop_back();
  SLUICE_ASSERT(taken_[slot] == 0, "a free segment was already taken");
  taken_[slot] = 1;
  return segment_at(slot);
}

void segment_pool::give(std::byte* segment) noexcept {
  check_owner();
  SLUICE_ASSERT(owns(segment), "segment given to a pool it does not belong to");
  SLUICE_ASSERT(static_cast<std::size_t>(segment - base_) % segment_bytes_ == 0, "not a segment start");
  const std::uint32_t slot = slot_of(segment);
  // Exactly once: a segment given back twice would be lent to two owners at once.
  SLUICE_ASSERT(taken_[slot] != 0, "a segment given back twice, or never taken");
  // A pool waiting for a segment comes before the free list: a free segment while another pool's
  // waiter waits would be a lost wake-up. Pools that no longer want one are dropped on the way.
  while (segment_waiter* w = waiting_head_) {
    unlink(*w);
    if (!w->wants_segment()) continue;
    w->take_segment(segment);  // stays taken; the pool schedules its waiter
    if (w->wants_segment()) link_back(*w);  // still short: behind the others (they take turns)
    return;
  }
  taken_[slot] = 0;
  free_.push_back(slot);  // within reserved capacity: no allocation
}

void segment_pool::wait_for_segment(segment_waiter& w) noexcept {
  check_owner();
  if (!w.queued_) link_back(w);
}

void segment_pool::cancel_wait(segment_waiter& w) noexcept {
  if (w.queued_) unlink(w);
}

void segment_pool::link_back(segment_waiter& w) noexcept {
  w.queued_ = true;
  w.prev_ = waiting_tail_;
  w.next_ = nullptr;
  if (waiting_tail_ != nullptr) waiting_tail_->next_ = &w; else waiting_head_ = &w;
  waiting_tail_ = &w;
  ++waiting_count_;
}

void segment_pool::unlink(segment_waiter& w) noexcept {
  SLUICE_ASSERT(w.queued_ && waiting_count_ > 0, "segment_pool: unqueue of a pool that is not queued");
  if (w.prev_ != nullptr) w.prev_->next_ = w.next_; else waiting_head_ = w.next_;
  if (w.next_ != nullptr) w.next_->prev_ = w.prev_; else waiting_tail_ = w.prev_;
  w.prev_ = w.next_ = nullptr;
  w.queued_ = false;
  --waiting_count_;
}

network_memory::network_memory(std::size_t total_bytes, std::size_t segment_bytes, std::size_t executors)
    : segment_bytes_(segment_bytes), segment_count_(0) {
  if (segment_bytes < min_segment_bytes || (segment_bytes & (segment_bytes - 1)) != 0) {
    throw std::invalid_argument(fmt::format(
        "network memory: segment size {} bytes must be a power of two of at least {} bytes", segment_bytes,
        min_segment_bytes));
  }
  if (executors == 0) throw std::invalid_argument("network memory: needs at least one executor");
  segment_count_ = total_bytes / segment_bytes;
  if (segment_count_ < executors) {
    throw std::invalid_argument(fmt::format(
        "network memory: {} bytes make {} segments of {} bytes, fewer than one per executor ({} executors); "
        "raise the total to at least {} bytes",
        total_bytes, segment_count_, segment_bytes, executors, executors * segment_bytes));
  }
  if (segment_count_ > UINT32_MAX) {
    throw std::invalid_argument(fmt::format("network memory: {} segments is more than 2^32", segment_count_));
  }
  // One mapping, faulted in now (start-up), not on the data path: a first write to a fresh page costs
  // a page fault, which would otherwise land on the first records through every segment. Huge pages
  // where the kernel allows them, since producers write to many segments at once.
  // Segments are aligned to their size: map one segment more and trim the ends.
  const std::size_t bytes = segment_count_ * segment_bytes_;
  void* mapped = ::mmap(nullptr, bytes + segment_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  const auto raw = reinterpret_cast<std::uintptr_t>(mapped);
  const std::uintptr_t aligned = (raw + segment_bytes_ - 1) & ~(std::uintptr_t{segment_bytes_} - 1);
  if (aligned > raw) ::munmap(mapped, aligned - raw);
  if (const std::size_t tail = segment_bytes_ - (aligned - raw); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  }
  base_ = reinterpret_cast<std::byte*>(aligned);
  (void)::madvise(base_, bytes, MADV_HUGEPAGE);
  for (std::size_t at = 0; at < bytes; at += 4096) base_[at] = std::byte{0};
  pools_.reserve(executors);
  const std::size_t share = segment_count_ / executors;
  const std::size_t extra = segment_count_ % executors;  // the first `extra` executors get one more
  std::size_t first = 0;
  for (std::size_t i = 0; i < executors; ++i) {
    const std::size_t n = share + (i < extra ? 1 : 0);
    pools_.push_back(std::make_unique<segment_pool>(base_ + first * segment_bytes_, segment_bytes_,
                                                    static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(n)));
    first += n;
  }
  assert(first == segment_count_);
}

network_memory::~network_memory() {
  for ([[maybe_unused]] auto& p : pools_) {
    assert(p->free_segments() == p->total_segments() && "network memory freed while segments are taken");
  }
  pools_.clear();
  ::munmap(base_, segment_count_ * segment_bytes_);
}

}  // namespace sluice::buffers
