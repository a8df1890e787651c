#pragma once
// local_buffer_pool: a bounded pool of buffers for one gate or partition, on one executor.
//
// Protocol:
// - The pool holds between `min_segments` and `max_segments` segments of its executor's
//   segment_pool. The minimum is reserved at construction (or it throws); more are drawn on demand
//   up to the maximum, so the maximum bounds the pool's memory (invariant 6).
// - `try_request()` lends a free segment as a buffer, or nullopt. `co_await request()` suspends when
//   none is free; waiters queue FIFO, and a newer try_request never barges ahead of them.
// - When a buffer's last reference goes (buffer.hpp), its segment is recycled here, on the owner
//   executor: it goes to the first waiter, which is SCHEDULED with it (never called: invariant 3);
//   with no waiter it goes to the free list, or back to the segment_pool above the minimum.
// - Pools of one executor share its segment_pool. A pool with waiters that is below its maximum
//   queues there for a segment (segment.hpp): a segment ANY pool of the executor gives back goes to
//   the longest-waiting such pool, which hands it to its first waiter, scheduled as above.
// - A waiter that is stopped first resumes with nullopt and takes nothing. `close()` (and the
//   destructor) wakes every waiter with nullopt; later requests get nullopt; buffers still out are
//   recycled normally and their segments go back to the segment_pool.
// - Bookkeeping, in every build: every segment has a state (not held / free / in use). A double
//   recycle, a recycle into the wrong pool, or destruction with buffers outstanding is a violation:
//   it is counted (violations()) and aborts the process (SLUICE_ASSERT, on in Release too), unless
//   a test turned that off.
//
//   local_buffer_pool pool(memory.pool(i), 2, 8);
//   std::optional<buffer> b = co_await pool.request();
//   if (!b) co_return;  // stopped, or the pool was closed

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/segment.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/detail/wait_list.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace sluice::buffers {

class local_buffer_pool final : private segment_waiter {
 public:
  // On the owner executor (the current one, or none for single-threaded use off any executor).
  // Throws std::invalid_argument for bad bounds, std::runtime_error if the minimum is not free.
  local_buffer_pool(segment_pool& segments, std::size_t min_segments, std::size_t max_segments);
  ~local_buffer_pool();
  local_buffer_pool(const local_buffer_pool&) = delete;
  local_buffer_pool& operator=(const local_buffer_pool&) = delete;

  std::optional<buffer> try_request();

  class request_awaiter : public runtime::detail::list_wait {
   public:
    explicit request_awaiter(local_buffer_pool& pool) noexcept : pool_(&pool) {}
    bool await_ready() {
      result_ = pool_->try_request();
      return result_.has_value() || pool_->closed_;
    }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
      SLUICE_ASSERT(pool_->on_owner(), "co_await request() off the pool's executor");
      enqueue(pool_->waiters_, h, runtime::detail::stop_token_of(h));
      pool_->wait_for_segment();
    }
    // Never touches the pool: a closed pool may be gone by now.
    std::optional<buffer> await_resume() noexcept { return std::move(result_); }

   private:
    friend class local_buffer_pool;
    local_buffer_pool* pool_;
    std::optional<buffer> result_{};
  };
  // Yields a buffer, or nullopt if the waiting task was stopped or the pool closed.
  request_awaiter request() noexcept { return request_awaiter{*this}; }

  // Wakes every waiter with nullopt; later requests get nullopt. Idempotent.
  void close() noexcept;
  bool closed() const noexcept { return closed_; }

  std::size_t available() const noexcept { return free_.size(); }  // held and free
  std::size_t in_use() const noexcept { return in_use_; }           // lent out (handles or views)
  std::size_t held() const noexcept { return held_; }               // available() + in_use()
  std::size_t waiters() const noexcept { return waiters_.size(); }
  std::size_t min_segments() const noexcept { return min_; }
  std::size_t max_segments() const noexcept { return max_; }
  std::size_t segment_bytes() const noexcept { return segments_->segment_bytes(); }
  runtime::executor* owner() const noexcept { return owner_; }
  bool on_owner() const noexcept { return runtime::executor::current() == owner_; }

  // Hands back a segment taken with buffer::detach(). Prefer buffer handles.
  void recycle(std::byte* segment) noexcept;

  // Sets `wake` (an event of the owner executor) once `b` is the last reference to its segment,
  // i.e. when the last view of it goes. Setting an event only schedules its waiters (invariant 3).
  // At most one watcher per buffer; unwatch() before `wake` is destroyed.
  void watch_unique(const buffer& b, runtime::event& wake) noexcept;
  void unwatch(const buffer& b) noexcept;
  std::uint32_t references(const buffer& b) const noexcept;

  // --- debug counters, for assertions in tests ---------------------------------------------
  std::uint64_t recycled() const noexcept { return recycled_; }                // segments recycled
  std::uint64_t foreign_releases() const noexcept { return foreign_releases_; }  // came home by inbox
  std::uint64_t violations() const noexcept { return violations_; }
  // Test-only: count violations without asserting (death-free tests of the checks).
  void set_assert_on_violation(bool on) noexcept { assert_on_violation_ = on; }

 private:
  friend class buffer;
  friend class buffer_view;
  enum class slot_state : std::uint8_t { not_held, free, in_use };
  struct slot_info {
    std::uint32_t refs = 0;
    slot_state state = slot_state::not_held;
    runtime::event* unique_watcher = nullptr;
  };

  void check_owner() const noexcept { SLUICE_ASSERT(on_owner(), "buffer pool used off its owning executor"); }
  void violation(const char* what) noexcept;
  std::optional<std::uint32_t> take_slot() noexcept;
  buffer lend(std::uint32_t slot) noexcept;
  // Reference counting (buffer.hpp). drop_ref may run on any thread; the others on the owner only.
  void add_ref(std::uint32_t slot) noexcept;
  void drop_ref(std::uint32_t slot) noexcept;
  void drop_ref_on_owner(std::uint32_t slot) noexcept;
  void recycle_slot(std::uint32_t slot) noexcept;
  void give_back(std::uint32_t slot) noexcept;
  // segment_waiter: a waiter below the maximum can use a segment another pool gives back.
  void wait_for_segment() noexcept;
  bool wants_segment() const noexcept override;
  void take_segment(std::byte* segment) noexcept override;

  segment_pool* segments_;
  runtime::executor* owner_;
  std::size_t min_;
  std::size_t max_;
  std::vector<slot_info> slots_;     // one per segment of segments_
  std::vector<std::uint32_t> free_;  // slots held and free; capacity max_, so never allocates
  std::size_t held_ = 0;
  std::size_t in_use_ = 0;
  runtime::detail::wait_list waiters_;
  bool closed_ = false;
  bool assert_on_violation_ = true;
  std::uint64_t recycled_ = 0;
  std::uint64_t foreign_releases_ = 0;
  std::uint64_t violations_ = 0;
};

}  // namespace sluice::buffers
