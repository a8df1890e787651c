#pragma once
// Network memory: a fixed set of fixed-size segments, allocated once and divided among executors.
//
// - `network_memory` maps `total_bytes` ONCE at start-up (aligned to the segment size, faulted in then), cuts it into
//   segments of `segment_bytes` (a power of two, >= 4 KiB) and gives every executor a contiguous
//   share: executor i owns the segments of `pool(i)`. Nothing is allocated afterwards (invariant 6).
// - `segment_pool` is one executor's free list of its segments. It belongs to that executor: the
//   first executor that takes or gives a segment becomes its owner, and every later call asserts it
//   runs there (invariant 1, SLUICE_ASSERT: on in every build). take/give never allocate: the free
//   list is a stack sized up front. A segment given back twice, or never taken, aborts.
// - Local buffer pools (buffer_pool.hpp) draw their segments from the segment_pool of their executor.
//   A pool whose waiters could use one more segment (it is below its maximum) queues here, FIFO,
//   as a segment_waiter. A segment given back goes to the first pool in that queue that can still
//   take it, ahead of the free list, and that pool hands it to its oldest waiter by scheduling it
//   (invariant 3); a pool that still waits goes to the back, so pools take turns. So a segment one
//   pool gives back is never left free while a waiter of another pool waits for one.
//
//   network_memory memory(64 << 20, 32 << 10, engine.size());
//   segment_pool& mine = memory.pool(executor_index);

#include <sluice/runtime/executor.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::buffers {

inline constexpr std::size_t default_segment_bytes = 32 * 1024;
inline constexpr std::size_t min_segment_bytes = 4 * 1024;

// A local buffer pool waiting for a segment of its executor's segment_pool. Intrusive, so queuing
// never allocates; the pool unqueues itself (cancel_wait) before it goes.
class segment_waiter {
 public:
  // True while it has a waiter and is below its maximum.
  virtual bool wants_segment() const noexcept = 0;
  // Takes `segment` for its oldest waiter and schedules that waiter; it runs nothing of it now.
  virtual void take_segment(std::byte* segment) noexcept = 0;

 protected:
  segment_waiter() = default;
  ~segment_waiter() = default;
  segment_waiter(const segment_waiter&) = delete;
  segment_waiter& operator=(const segment_waiter&) = delete;

 private:
  friend class segment_pool;
  segment_waiter* prev_ = nullptr;
  segment_waiter* next_ = nullptr;
  bool queued_ = false;
};

class segment_pool {
 public:
  segment_pool(std::byte* base, std::size_t segment_bytes, std::uint32_t first_index, std::uint32_t segments);
  segment_pool(const segment_pool&) = delete;
  segment_pool& operator=(const segment_pool&) = delete;

  // A free segment (segment_bytes long), or null when every segment is taken.
  std::byte* take() noexcept;
  // Returns a segment taken from this pool: to the first queued waiter that wants it, else to the
  // free list.
  void give(std::byte* segment) noexcept;
  // Queues `w` (once; FIFO) to be offered the next segment given back. On the owner executor.
  void wait_for_segment(segment_waiter& w) noexcept;
  // Unqueues `w` if it is queued. Idempotent.
  void cancel_wait(segment_waiter& w) noexcept;
  // Pools queued for a segment (some may no longer want one: they are skipped when offered).
  std::size_t waiting_pools() const noexcept { return waiting_count_; }

  std::size_t segment_bytes() const noexcept { return segment_bytes_; }
  std::size_t total_segments() const noexcept { return segments_; }
  std::size_t free_segments() const noexcept { return free_.size(); }
  // True if `p` points into one of this pool's segments.
  bool owns(const std::byte* p) const noexcept {
    return p >= base_ && p < base_ + segment_bytes_ * segments_;
  }
  // Position of a segment within this pool, 0 .. total_segments()-1.
  std::uint32_t slot_of(const std::byte* segment) const noexcept {
    return static_cast<std::uint32_t>(static_cast<std::size_t>(segment - base_) / segment_bytes_);
  }
  std::byte* segment_at(std::uint32_t slot) const noexcept { return base_ + std::size_t{slot} * segment_bytes_; }
  // Index of this pool's first segment within the whole network memory.
  std::uint32_t first_index() const noexcept { return first_index_; }
  // The executor that owns this pool (null until first used on an executor).
  runtime::executor* owner() const noexcept { return owner_; }

 private:
  void check_owner() noexcept;
  void unlink(segment_waiter& w) noexcept;
  void link_back(segment_waiter& w) noexcept;

  std::byte* base_;
  std::size_t segment_bytes_;
  std::uint32_t first_index_;
  std::uint32_t segments_;
  std::vector<std::uint32_t> free_;  // slots; capacity reserved up front, so push/pop never allocate
  std::vector<std::uint8_t> taken_;  // per slot: 1 while taken (a double give is caught)
  runtime::executor* owner_ = nullptr;
  segment_waiter* waiting_head_ = nullptr;  // FIFO of pools waiting for a segment
  segment_waiter* waiting_tail_ = nullptr;
  std::size_t waiting_count_ = 0;
};

class network_memory {
 public:
  // Throws std::invalid_argument with the offending values when the sizes do not work out, and
  // std::bad_alloc when the memory cannot be allocated.
  network_memory(std::size_t total_bytes, std::size_t segment_bytes, std::size_t executors);
  ~network_memory();
  network_memory(const network_memory&) = delete;
  network_memory& operator=(const network_memory&) = delete;

  std::size_t segment_bytes() const noexcept { return segment_bytes_; }
  std::size_t segment_count() const noexcept { return segment_count_; }
  // Bytes actually in segments (total_bytes rounded down to whole segments).
  std::size_t total_bytes() const noexcept { return segment_bytes_ * segment_count_; }
  std::size_t executors() const noexcept { return pools_.size(); }
  segment_pool& pool(std::size_t executor_index) noexcept { return *pools_.at(executor_index); }

 private:
  std::size_t segment_bytes_;
  std::size_t segment_count_;
  std::byte* base_ = nullptr;
  std::vector<std::unique_ptr<segment_pool>> pools_;
};

}  // namespace sluice::buffers
