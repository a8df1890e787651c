// Pools of one executor share its segment_pool: a segment one pool gives back wakes a waiter of
// another pool that can take it, in FIFO order among the waiting pools, by scheduling.
#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <optional>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using sluice::test::virtual_time;

namespace {

constexpr std::size_t segment_bytes = 4096;

// Waits for a buffer of `pool`, notes `id` in `order`, and keeps the buffer in `kept`.
task<void> take_and_keep(local_buffer_pool* pool, std::vector<int>* order, int id, std::vector<buffer>* kept) {
  std::optional<buffer> b = co_await pool->request();
  if (!b) co_return;
  order->push_back(id);
  kept->push_back(std::move(*b));
}

struct wakeup_seen {
  std::size_t ran_inline = 99;         // waiters that had run when the release returned
  std::size_t free_after_release = 99;  // segments left free in the executor's segment pool
  std::size_t waiters_after_release = 99;
  int turns_waited = -1;                // turns until the waiter had its buffer (-1: never)
};

// Pool `b` gives a segment back to the executor; pool `a`, at its minimum, has a waiter.
task<void> another_pool_gives_back(network_memory* memory, wakeup_seen* seen) {
  segment_pool& segments = memory->pool(0);  // 3 segments
  local_buffer_pool a(segments, 1, 2);
  local_buffer_pool b(segments, 1, 2);
  std::optional<buffer> a_min = a.try_request();
  std::optional<buffer> b_min = b.try_request();
  std::optional<buffer> b_extra = b.try_request();  // the executor's last free segment
  REQUIRE(a_min);
  REQUIRE(b_min);
  REQUIRE(b_extra);
  REQUIRE(segments.free_segments() == 0);

  std::vector<int> order;
  std::vector<buffer> kept;
  scope waiters;
  waiters.spawn(take_and_keep(&a, &order, 1, &kept));
  co_await yield();
  REQUIRE(a.waiters() == 1);

  b_extra.reset();  // above b's minimum: back to the executor's segment pool
  seen->ran_inline = order.size();
  seen->free_after_release = segments.free_segments();
  seen->waiters_after_release = a.waiters();
  for (int turn = 0; turn < 1000; ++turn) {
    if (!order.empty()) {
      seen->turns_waited = turn;
      break;
    }
    co_await yield();
  }
  a_min.reset();  // a waiter still waiting (the bug) gets a's own segment, so the test ends
  co_await waiters.join();
  kept.clear();
  REQUIRE(a.in_use() == 0);
  REQUIRE(b.violations() == 0);
}

}  // namespace

TEST_CASE("a segment another pool gives back to the executor wakes a waiter of a pool that can take it",
          "[buffer_pool]") {
  network_memory memory(3 * segment_bytes, segment_bytes, 1);
  wakeup_seen seen;
  sync_wait(another_pool_gives_back(&memory, &seen), virtual_time());
  CHECK(seen.ran_inline == 0);             // scheduled, not resumed inside the release
  CHECK(seen.waiters_after_release == 0);  // handed straight to the waiter...
  CHECK(seen.free_after_release == 0);     // ...not left free in the segment pool
  CHECK(seen.turns_waited >= 0);           // the waiter ran (it had 1,000 turns)
  CHECK(seen.turns_waited <= 1);
  CHECK(memory.pool(0).free_segments() == 3);
}

namespace {

// Pools `a` (two waiters) and `c` (one) wait; pool `b` gives back three segments, one at a time.
task<void> pools_wait_in_fifo_order(network_memory* memory, std::vector<int>* served) {
  segment_pool& segments = memory->pool(0);  // 6 segments
  local_buffer_pool a(segments, 1, 3);
  local_buffer_pool c(segments, 1, 2);
  local_buffer_pool b(segments, 1, 4);
  std::optional<buffer> a_min = a.try_request();
  std::optional<buffer> c_min = c.try_request();
  std::vector<buffer> b_held;
  for (int i = 0; i < 4; ++i) b_held.push_back(*b.try_request());
  REQUIRE(segments.free_segments() == 0);

  std::vector<int> order;
  std::vector<buffer> kept;
  scope waiters;
  waiters.spawn(take_and_keep(&a, &order, 1, &kept));  // a waits first
  waiters.spawn(take_and_keep(&c, &order, 3, &kept));  // then c
  waiters.spawn(take_and_keep(&a, &order, 2, &kept));  // then a's second waiter
  co_await yield();
  REQUIRE(a.waiters() == 2);
  REQUIRE(c.waiters() == 1);
  for (int i = 0; i < 3; ++i) {
    b_held.pop_back();  // above b's minimum: to the executor, and from there to a waiting pool
    co_await yield();
    co_await yield();
  }
  *served = order;
  CHECK(segments.free_segments() == 0);
  // Whatever was served, let every waiter finish so the test ends.
  a_min.reset();
  c_min.reset();
  co_await yield();
  kept.clear();
  co_await waiters.join();
  kept.clear();
}

}  // namespace

TEST_CASE("pools waiting for the executor's segments are served in FIFO order, one segment at a time",
          "[buffer_pool]") {
  network_memory memory(6 * segment_bytes, segment_bytes, 1);
  std::vector<int> served;
  sync_wait(pools_wait_in_fifo_order(&memory, &served), virtual_time());
  CHECK(served == std::vector<int>{1, 3, 2});
  CHECK(memory.pool(0).free_segments() == 6);
}

namespace {

// A pool closed while it waits for a segment leaves the queue: a later segment stays free.
task<void> closed_while_waiting(network_memory* memory, std::size_t* free_after, bool* waiter_got) {
  segment_pool& segments = memory->pool(0);  // 3 segments
  local_buffer_pool a(segments, 1, 2);
  local_buffer_pool b(segments, 1, 2);
  std::optional<buffer> a_min = a.try_request();
  std::optional<buffer> b_min = b.try_request();
  std::optional<buffer> b_extra = b.try_request();
  std::vector<int> order;
  std::vector<buffer> kept;
  scope waiters;
  waiters.spawn(take_and_keep(&a, &order, 1, &kept));
  co_await yield();
  a.close();  // the waiter resumes with nullopt
  co_await waiters.join();
  *waiter_got = !order.empty();
  b_extra.reset();
  *free_after = segments.free_segments();
  a_min.reset();  // a closed pool gives its segments back as they come home
}

}  // namespace

TEST_CASE("a pool closed while it waits for a segment takes none of those given back later", "[buffer_pool]") {
  network_memory memory(3 * segment_bytes, segment_bytes, 1);
  std::size_t free_after = 0;
  bool waiter_got = true;
  sync_wait(closed_while_waiting(&memory, &free_after, &waiter_got), virtual_time());
  CHECK_FALSE(waiter_got);
  CHECK(free_after == 1);
  CHECK(memory.pool(0).free_segments() == 3);
}
