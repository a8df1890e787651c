#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using sluice::test::virtual_time;

TEST_CASE("a pool reserves its minimum up front and grows on demand up to its maximum", "[buffer_pool]") {
  network_memory memory(16 * 4096, 4096, 1);
  segment_pool& segments = memory.pool(0);
  {
    local_buffer_pool pool(segments, 2, 4);
    REQUIRE(pool.held() == 2);
    REQUIRE(pool.available() == 2);
    REQUIRE(segments.free_segments() == 14);

    std::vector<buffer> taken;
    for (int i = 0; i < 4; ++i) {
      std::optional<buffer> b = pool.try_request();
      REQUIRE(b.has_value());
      REQUIRE(b->capacity() == 4096);
      REQUIRE(b->size() == 0);
      taken.push_back(std::move(*b));
    }
    REQUIRE_FALSE(pool.try_request().has_value());  // the maximum bounds the pool
    REQUIRE(pool.in_use() == 4);
    REQUIRE(pool.held() == 4);
    REQUIRE(segments.free_segments() == 12);

    taken.clear();
    // Above the minimum, recycled segments go back to the executor's segment pool.
    REQUIRE(pool.in_use() == 0);
    REQUIRE(pool.held() == 2);
    REQUIRE(pool.available() == 2);
    REQUIRE(segments.free_segments() == 14);
    REQUIRE(pool.recycled() == 4);
    REQUIRE(pool.violations() == 0);
  }
  REQUIRE(segments.free_segments() == 16);  // a destroyed pool gives everything back
}

TEST_CASE("pool bounds that cannot work are refused with the reason", "[buffer_pool]") {
  network_memory memory(4 * 4096, 4096, 1);
  REQUIRE_THROWS_WITH(local_buffer_pool(memory.pool(0), 0, 2), Catch::Contains("1 <= min <= max"));
  REQUIRE_THROWS_WITH(local_buffer_pool(memory.pool(0), 3, 2), Catch::Contains("1 <= min <= max"));
  REQUIRE_THROWS_WITH(local_buffer_pool(memory.pool(0), 1, 5), Catch::Contains("exceeds the executor's 4 segments"));
  local_buffer_pool first(memory.pool(0), 3, 3);
  REQUIRE_THROWS_WITH(local_buffer_pool(memory.pool(0), 2, 2),
                      Catch::Contains("needs 2 segments") && Catch::Contains("only 1 free"));
}

TEST_CASE("a closed pool lends nothing and takes its buffers back as they come home", "[buffer_pool]") {
  network_memory memory(4 * 4096, 4096, 1);
  local_buffer_pool pool(memory.pool(0), 2, 2);
  std::optional<buffer> b = pool.try_request();
  REQUIRE(b.has_value());
  pool.close();
  REQUIRE_FALSE(pool.try_request().has_value());
  REQUIRE(memory.pool(0).free_segments() == 3);
  b.reset();
  REQUIRE(pool.in_use() == 0);
  REQUIRE(memory.pool(0).free_segments() == 4);
}

namespace {

task<void> take_and_record(local_buffer_pool* pool, std::vector<int>* order, int id) {
  std::optional<buffer> b = co_await pool->request();
  if (b.has_value()) order->push_back(id);
  // b goes out of scope here: the next waiter gets the segment.
}

// Releases the held buffer, then notes how many waiters had already run: none may have.
task<void> release_and_check(buffer* held, std::vector<int>* order, std::size_t* ran_inline,
                             local_buffer_pool* pool, std::size_t* waiters_seen) {
  co_await yield();  // every waiter is suspended by now
  *waiters_seen = pool->waiters();
  held->reset();
  *ran_inline = order->size();
}

task<void> fifo_waiters(network_memory* memory, std::vector<int>* order, std::size_t* ran_inline,
                        std::size_t* waiters_seen) {
  local_buffer_pool pool(memory->pool(0), 1, 1);
  std::optional<buffer> held = pool.try_request();
  REQUIRE(held.has_value());
  co_await when_all(take_and_record(&pool, order, 1), take_and_record(&pool, order, 2),
                    take_and_record(&pool, order, 3),
                    release_and_check(&*held, order, ran_inline, &pool, waiters_seen));
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.available() == 1);
}

}  // namespace

TEST_CASE("waiters get recycled buffers in FIFO order, by scheduling rather than by being called",
          "[buffer_pool]") {
  network_memory memory(4 * 4096, 4096, 1);
  std::vector<int> order;
  std::size_t ran_inline = 99;
  std::size_t waiters_seen = 0;
  sync_wait(fifo_waiters(&memory, &order, &ran_inline, &waiters_seen), virtual_time());
  REQUIRE(waiters_seen == 3);
  REQUIRE(ran_inline == 0);  // reset() returned before any waiter ran
  REQUIRE(order == std::vector<int>{1, 2, 3});
}

namespace {

struct handoff_seen {
  std::size_t available_after_release = 99;
  std::size_t waiters_after_release = 99;
  bool newcomer_got_one = true;
  bool waiter_got_one = false;
  bool in_time = false;
  std::size_t in_use_after = 99;
};

task<void> wait_once(local_buffer_pool* pool, bool* got) {
  std::optional<buffer> b = co_await pool->request();
  *got = b.has_value();
}

// In the same turn, right after the waiter registered: release, then a newcomer tries to barge in.
task<void> release_right_after(local_buffer_pool* pool, buffer* held, handoff_seen* seen) {
  held->reset();
  seen->available_after_release = pool->available();
  seen->waiters_after_release = pool->waiters();
  std::optional<buffer> newcomer = pool->try_request();
  seen->newcomer_got_one = newcomer.has_value();
  co_return;
}

task<void> register_as_released(network_memory* memory, handoff_seen* seen) {
  local_buffer_pool pool(memory->pool(0), 1, 1);
  std::optional<buffer> held = pool.try_request();
  // when_all starts the waiter first: it suspends, and the release follows in the same turn. A lost
  // wake-up would leave the waiter waiting: the timeout (virtual time) ends it without a buffer.
  const auto done = co_await with_timeout(
      when_all(wait_once(&pool, &seen->waiter_got_one), release_right_after(&pool, &*held, seen)),
      std::chrono::seconds(1));
  seen->in_time = done.has_value();
  seen->in_use_after = pool.in_use();
}

// The other order: the release lands first, then the waiter registers.
task<void> release_then_register(network_memory* memory, bool* got) {
  local_buffer_pool pool(memory->pool(0), 1, 1);
  std::optional<buffer> held = pool.try_request();
  held.reset();
  const bool in_time = co_await with_timeout(wait_once(&pool, got), std::chrono::seconds(1));
  if (!in_time) *got = false;
  REQUIRE(pool.waiters() == 0);
}

}  // namespace

TEST_CASE("a waiter that registers just as a buffer is recycled is not lost (scenario 18)", "[buffer_pool]") {
  network_memory memory(4 * 4096, 4096, 1);
  SECTION("the waiter registers first, the release follows in the same turn") {
    handoff_seen seen;
    sync_wait(register_as_released(&memory, &seen), virtual_time());
    REQUIRE(seen.waiters_after_release == 0);   // handed straight to the waiter...
    REQUIRE(seen.available_after_release == 0); // ...not parked in the free list
    REQUIRE_FALSE(seen.newcomer_got_one);       // and no newcomer can take it
    REQUIRE(seen.waiter_got_one);
    REQUIRE(seen.in_time);
    REQUIRE(seen.in_use_after == 0);
  }
  SECTION("the release lands first, the waiter registers after it") {
    bool got = false;
    sync_wait(release_then_register(&memory, &got), virtual_time());
    REQUIRE(got);
  }
}

namespace {

struct shared_segments_seen {
  bool waited = false;           // the waiter had to wait: its pool was below its maximum, the segments gone
  bool got = false;              // it got the segment the other pool gave back
  bool newcomer_got_one = true;  // a try_request right after the give-back barged ahead of it
};

task<void> wait_for_segment(local_buffer_pool* pool, shared_segments_seen* seen) {
  seen->waited = pool->available() == 0;
  std::optional<buffer> b = co_await pool->request();
  seen->got = b.has_value();
}

// Then a newcomer tries to barge in ahead of the waiter.
task<void> give_back_from_other(std::optional<buffer>* above_min, local_buffer_pool* a, shared_segments_seen* seen) {
  co_await yield();  // the waiter is suspended by now
  above_min->reset();  // above its pool's minimum: the segment goes back to the executor
  std::optional<buffer> newcomer = a->try_request();
  seen->newcomer_got_one = newcomer.has_value();
}

// Two pools share the executor's four segments: `a` holds its minimum of one, `b` the other three.
// A waiter on `a` (below its maximum) waits for a segment; `b` gives one back.
task<void> across_pools(network_memory* memory, shared_segments_seen* seen) {
  local_buffer_pool a(memory->pool(0), 1, 4);
  local_buffer_pool b(memory->pool(0), 1, 4);
  std::optional<buffer> a_held = a.try_request();
  std::vector<buffer> b_held;
  for (int i = 0; i < 3; ++i) b_held.push_back(*b.try_request());
  std::optional<buffer> above_min = std::move(b_held.back());
  b_held.pop_back();
  const auto done = co_await with_timeout(
      when_all(wait_for_segment(&a, seen), give_back_from_other(&above_min, &a, seen)), std::chrono::seconds(1));
  (void)done;  // a lost wake-up times out: the waiter ends without a segment
}

}  // namespace

// Was a bug (now fixed; this test failed before the fix): a pool's waiters are woken only by recycles into that same
// pool (buffer_pool.cpp), so a segment another pool returns to the executor's segment pool wakes
// nobody.
TEST_CASE("scenario 18: a waiter is woken by a segment another pool of its executor gives back",
          "[buffer_pool][scenario]") {
  network_memory memory(4 * 4096, 4096, 1);
  shared_segments_seen seen;
  sync_wait(across_pools(&memory, &seen), virtual_time());
  CHECK(seen.waited);
  CHECK(seen.got);
}

TEST_CASE("scenario 18: a newcomer does not take a segment another pool gives back ahead of a waiter",
          "[buffer_pool][scenario]") {
  network_memory memory(4 * 4096, 4096, 1);
  shared_segments_seen seen;
  sync_wait(across_pools(&memory, &seen), virtual_time());
  CHECK(seen.waited);
  CHECK_FALSE(seen.newcomer_got_one);
}

namespace {

task<std::optional<buffer>> request_from(local_buffer_pool* pool) { co_return co_await pool->request(); }

task<void> stoppable_waiter(local_buffer_pool* pool, std::stop_token token, int* outcome) {
  std::optional<buffer> b = co_await with_stop_token(request_from(pool), std::move(token));
  *outcome = b.has_value() ? 1 : 0;
}

task<void> stop_then_release(std::stop_source* stop, buffer* held, local_buffer_pool* pool, std::size_t* waiters) {
  co_await yield();
  *waiters = pool->waiters();
  stop->request_stop();
  held->reset();
  co_return;
}

task<void> stopped_waiter(network_memory* memory, bool with_second, int* first, int* second,
                          std::size_t* waiters, std::size_t* available_after) {
  local_buffer_pool pool(memory->pool(0), 1, 1);
  std::optional<buffer> held = pool.try_request();
  std::stop_source stop;
  if (with_second) {
    bool got = false;
    co_await when_all(stoppable_waiter(&pool, stop.get_token(), first), wait_once(&pool, &got),
                      stop_then_release(&stop, &*held, &pool, waiters));
    *second = got ? 1 : 0;
  } else {
    co_await when_all(stoppable_waiter(&pool, stop.get_token(), first),
                      stop_then_release(&stop, &*held, &pool, waiters));
  }
  *available_after = pool.available();
  REQUIRE(pool.in_use() == 0);
}

}  // namespace

TEST_CASE("a stopped waiter gets nullopt and takes no buffer", "[buffer_pool]") {
  network_memory memory(4 * 4096, 4096, 1);
  int first = -1;
  int second = -1;
  std::size_t waiters = 0;
  std::size_t available_after = 0;
  SECTION("alone: the recycled buffer stays in the pool") {
    sync_wait(stopped_waiter(&memory, false, &first, &second, &waiters, &available_after), virtual_time());
    REQUIRE(waiters == 1);
    REQUIRE(first == 0);
    REQUIRE(available_after == 1);
  }
  SECTION("ahead of another waiter: the buffer goes to the next one in line") {
    sync_wait(stopped_waiter(&memory, true, &first, &second, &waiters, &available_after), virtual_time());
    REQUIRE(waiters == 2);
    REQUIRE(first == 0);
    REQUIRE(second == 1);
    REQUIRE(available_after == 1);
  }
}

namespace {

task<void> close_while_waiting(local_buffer_pool* pool, std::size_t* waiters) {
  co_await yield();
  *waiters = pool->waiters();
  pool->close();
  co_return;
}

task<void> closed_pool_wakes_waiters(network_memory* memory, int* a, int* b, std::size_t* waiters) {
  local_buffer_pool pool(memory->pool(0), 1, 1);
  std::optional<buffer> held = pool.try_request();
  std::stop_source never;
  co_await when_all(stoppable_waiter(&pool, never.get_token(), a), stoppable_waiter(&pool, never.get_token(), b),
                    close_while_waiting(&pool, waiters));
  std::optional<buffer> after = co_await pool.request();
  REQUIRE_FALSE(after.has_value());
}

}  // namespace

TEST_CASE("closing a pool wakes its waiters with nullopt, and later requests get nullopt", "[buffer_pool]") {
  network_memory memory(4 * 4096, 4096, 1);
  int a = -1;
  int b = -1;
  std::size_t waiters = 0;
  sync_wait(closed_pool_wakes_waiters(&memory, &a, &b, &waiters), virtual_time());
  REQUIRE(waiters == 2);
  REQUIRE(a == 0);
  REQUIRE(b == 0);
  REQUIRE(memory.pool(0).free_segments() == 4);
}

namespace {

struct bound_seen {
  std::size_t max_held = 0;
  std::size_t min_free_segments = SIZE_MAX;
  std::size_t produced = 0;
  std::size_t producer_waits = 0;
};

task<void> fast_producer(local_buffer_pool* pool, std::vector<buffer>* queue, std::size_t count, bound_seen* seen) {
  for (std::size_t i = 0; i < count; ++i) {
    if (pool->available() == 0 && pool->held() == pool->max_segments()) ++seen->producer_waits;
    std::optional<buffer> b = co_await pool->request();
    REQUIRE(b.has_value());
    queue->push_back(std::move(*b));
    ++seen->produced;
    seen->max_held = std::max(seen->max_held, pool->held());
  }
}

task<void> slow_consumer(local_buffer_pool* pool, segment_pool* segments, std::vector<buffer>* queue,
                         std::size_t count, bound_seen* seen) {
  for (std::size_t consumed = 0; consumed < count;) {
    for (int i = 0; i < 3; ++i) co_await yield();  // slow
    seen->min_free_segments = std::min(seen->min_free_segments, segments->free_segments());
    if (!queue->empty()) {
      queue->erase(queue->begin());
      ++consumed;
    }
    REQUIRE(pool->held() <= pool->max_segments());
  }
}

task<void> slow_consumer_run(network_memory* memory, bound_seen* seen) {
  local_buffer_pool pool(memory->pool(0), 2, 4);
  std::vector<buffer> queue;
  co_await when_all(fast_producer(&pool, &queue, 100, seen),
                    slow_consumer(&pool, &memory->pool(0), &queue, 100, seen));
}

}  // namespace

TEST_CASE("a slow consumer suspends the producer and memory stays at the pool's maximum (scenario 21)",
          "[buffer_pool]") {
  network_memory memory(16 * 4096, 4096, 1);
  bound_seen seen;
  sync_wait(slow_consumer_run(&memory, &seen), virtual_time());
  REQUIRE(seen.produced == 100);
  REQUIRE(seen.producer_waits > 0);
  REQUIRE(seen.max_held == 4);
  REQUIRE(seen.min_free_segments == 12);
  REQUIRE(memory.pool(0).free_segments() == 16);
}

namespace {

// Scenario 15's shape: two channels of one gate take buffers from the gate's pool; the
// channel-state writer keeps views of some of them while the channels recycle theirs. In Flink
// each recycle took a channel lock and called into the other channel (FLINK-22946); here a recycle
// only schedules the next waiter, so both channels run to the end.
struct gate_seen {
  std::size_t records[2] = {0, 0};
  std::size_t writer_held_max = 0;
  std::size_t in_use_max = 0;
};

task<void> channel(local_buffer_pool* pool, std::vector<buffer_view>* writer, int id, std::size_t count,
                   gate_seen* seen) {
  for (std::size_t i = 0; i < count; ++i) {
    std::optional<buffer> b = co_await pool->request();
    REQUIRE(b.has_value());
    b->append(std::as_bytes(std::span(&i, 1)));
    if (i % 3 == 0) writer->push_back(b->retain());  // captured as channel state
    seen->in_use_max = std::max(seen->in_use_max, pool->in_use());
    co_await yield();
    b.reset();  // recycled while the other channel may be waiting
    ++seen->records[id];
  }
}

task<void> state_writer(std::vector<buffer_view>* held, const bool* done, gate_seen* seen) {
  for (int turn = 0; turn < 100000 && !(*done && held->empty()); ++turn) {
    seen->writer_held_max = std::max(seen->writer_held_max, held->size());
    if (!held->empty()) held->erase(held->begin());  // a write completed: the view goes
    co_await yield();
    co_await yield();
  }
}

task<void> channels_done(task<void> a, task<void> b, bool* done) {
  co_await when_all(std::move(a), std::move(b));
  *done = true;
}

task<void> two_channels_and_writer(network_memory* memory, gate_seen* seen) {
  local_buffer_pool pool(memory->pool(0), 3, 3);
  std::vector<buffer_view> writer;
  bool done = false;
  co_await when_all(
      channels_done(channel(&pool, &writer, 0, 200, seen), channel(&pool, &writer, 1, 200, seen), &done),
      state_writer(&writer, &done, seen));
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.available() == 3);
  REQUIRE(pool.recycled() == 400);
  REQUIRE(pool.violations() == 0);
}

}  // namespace

TEST_CASE("two channels recycling while the state writer holds their buffers never deadlock (scenario 15)",
          "[buffer_pool]") {
  network_memory memory(8 * 4096, 4096, 1);
  gate_seen seen;
  sync_wait(two_channels_and_writer(&memory, &seen), virtual_time());
  REQUIRE(seen.records[0] == 200);
  REQUIRE(seen.records[1] == 200);
  REQUIRE(seen.writer_held_max > 0);
  REQUIRE(seen.in_use_max == 3);
  REQUIRE(memory.pool(0).free_segments() == 8);
}
