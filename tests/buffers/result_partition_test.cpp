#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace std::chrono_literals;
using sluice::test::virtual_time;

namespace {

constexpr std::size_t segment_bytes = 4096;

// What one subpartition delivered: its records, and the sequence of items ('d' data buffer,
// 'e' event, 'p' priority event, 'E' end-of-partition).
template <class T>
struct drained {
  std::vector<T> records;
  std::string items;
  bool partial_record_left = false;
};

template <class T>
drained<T> drain(result_partition& out, std::size_t subpartition) {
  drained<T> d;
  record_deserializer des;
  while (auto next = out.poll_next(subpartition)) {
    if (next->view.kind() == buffer_kind::event) {
      d.items += is_end_of_partition(next->view) ? 'E' : (next->priority ? 'p' : 'e');
      continue;
    }
    d.items += 'd';
    des.set_next_buffer(std::move(next->view));
    while (auto r = des.next_record<T>()) d.records.push_back(std::move(*r));
  }
  d.partial_record_left = des.has_partial_record();
  des.clear();
  return d;
}

std::string text(std::size_t bytes, int seed) {
  std::string s(bytes, 'a');
  for (std::size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>('a' + (i * 7 + static_cast<std::size_t>(seed)) % 26);
  return s;
}

task<buffer_view> make_event(local_buffer_pool* pool, std::byte tag) {
  std::optional<buffer> b = co_await pool->request();
  REQUIRE(b.has_value());
  b->set_kind(buffer_kind::event);
  b->append({&tag, 1});
  co_return b->retain();
}

std::string single_record(const buffer_view& view) {
  record_deserializer des;
  des.set_next_buffer(view.share());
  auto r = des.next_record<std::string>();
  des.clear();
  return r.value_or("<none>");
}

// ---------------------------------------------------------------------------------------------
task<void> forward_routing(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 3, .flush_timeout = 0ms, .forward_subpartition = 1});
    for (std::uint64_t i = 0; i < 5; ++i) {
      const bool ok = co_await out.emit_forward(i * 11);
      REQUIRE(ok);
    }
    REQUIRE(out.backlog(0) == 0);
    REQUIRE(out.backlog(1) == 5);
    REQUIRE(out.backlog(2) == 0);
    auto d = drain<std::uint64_t>(out, 1);
    REQUIRE(d.records == std::vector<std::uint64_t>{0, 11, 22, 33, 44});
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

task<void> hash_routing(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 4, .flush_timeout = 100ms});
    const std::vector<std::string> keys{"apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yuzu"};
    for (int round = 0; round < 5; ++round) {
      for (const auto& key : keys) {
        const bool ok = co_await out.emit_hashed(std::pair<std::string, int>(key, round), key);
        REQUIRE(ok);
      }
    }
    out.flush_all();
    std::map<std::string, std::size_t> home;
    std::size_t total = 0;
    for (std::size_t sub = 0; sub < 4; ++sub) {
      auto d = drain<std::pair<std::string, int>>(out, sub);
      std::map<std::string, int> next_round;
      for (const auto& [key, round] : d.records) {
        REQUIRE(std::hash<std::string>{}(key) % 4 == sub);
        auto placed = home.emplace(key, sub).first;
        REQUIRE(placed->second == sub);  // the same key always lands on the same subpartition
        REQUIRE(round == next_round[key]++);  // and in order
        ++total;
      }
    }
    REQUIRE(total == keys.size() * 5);
    REQUIRE(home.size() == keys.size());
  }
  REQUIRE(pool.in_use() == 0);
}

task<void> round_robin_routing(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 4, .flush_timeout = 100ms});
    for (std::uint32_t i = 0; i < 40; ++i) {
      const bool ok = co_await out.emit_round_robin(i);
      REQUIRE(ok);
    }
    out.flush_all();
    for (std::uint32_t sub = 0; sub < 4; ++sub) {
      auto d = drain<std::uint32_t>(out, sub);
      REQUIRE(d.records.size() == 10);
      for (std::uint32_t k = 0; k < 10; ++k) REQUIRE(d.records[k] == sub + 4 * k);
    }
  }
  REQUIRE(pool.in_use() == 0);
}

task<void> broadcast_routing(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 32);
  {
    result_partition out(pool, {.subpartitions = 3, .flush_timeout = 100ms});
    const std::vector<std::string> records{text(10, 1), text(3000, 2), text(10000, 3), "", text(500, 4)};
    for (const auto& r : records) {
      const bool ok = co_await out.emit_broadcast(r);
      REQUIRE(ok);
    }
    out.flush_all();
    for (std::size_t sub = 0; sub < 3; ++sub) {
      auto d = drain<std::string>(out, sub);
      REQUIRE(d.records == records);
      REQUIRE_FALSE(d.partial_record_left);
    }
  }
  REQUIRE(pool.in_use() == 0);
}

}  // namespace

TEST_CASE("forward routing sends every record to the task's own subpartition", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(forward_routing(&memory), virtual_time());
}

TEST_CASE("hash routing sends the same key to the same subpartition, hash mod n, in order", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(hash_routing(&memory), virtual_time());
}

TEST_CASE("round-robin routing spreads records evenly and in turn", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(round_robin_routing(&memory), virtual_time());
}

TEST_CASE("broadcast gives every subpartition every record, byte-exact, even records larger than a buffer",
          "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(broadcast_routing(&memory), virtual_time());
}

namespace {

task<void> spanning_records(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 32);
  {
    result_partition out(pool, {.subpartitions = 2, .flush_timeout = 100ms});
    std::vector<std::string> records;
    for (int i = 0; i < 12; ++i) records.push_back(text(static_cast<std::size_t>(700 * i + 3), i));
    records.push_back(text(3 * segment_bytes + 17, 99));  // larger than a buffer: spans four
    // The packing rule: a record that fits in one buffer starts a new buffer rather than span two;
    // a larger one fills the current buffer and continues.
    std::size_t used = 0;
    std::size_t full = 0;
    for (const auto& r : records) {
      const bool ok = co_await out.emit(r, 1);
      REQUIRE(ok);
      const std::size_t n = r.size() + 8;  // record prefix + string length
      if (n <= segment_bytes && used + n > segment_bytes) {
        ++full;
        used = 0;
      }
      full += (used + n) / segment_bytes;
      used = (used + n) % segment_bytes;
    }
    REQUIRE(out.backlog(1) == full);  // only full buffers are visible yet
    out.flush(1);
    REQUIRE(out.backlog(1) == full + 1);
    auto d = drain<std::string>(out, 1);
    REQUIRE(d.records == records);
    REQUIRE_FALSE(d.partial_record_left);
    REQUIRE(out.queued(0) == 0);
  }
  REQUIRE(pool.in_use() == 0);
}

task<void> flush_every_record(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 1, .flush_timeout = 0ms});
    for (std::size_t k = 1; k <= 5; ++k) {
      const bool ok = co_await out.emit(std::string("r") + std::to_string(k), 0);
      REQUIRE(ok);
      REQUIRE(out.backlog(0) == k);  // available at once, without a flusher or a flush()
    }
    auto d = drain<std::string>(out, 0);
    REQUIRE(d.records == std::vector<std::string>{"r1", "r2", "r3", "r4", "r5"});
    REQUIRE(d.items == "ddddd");
  }
  REQUIRE(pool.in_use() == 0);
}

struct timeline {
  std::size_t backlog_at_start = 99;
  std::size_t backlog_at_99ms = 99;
  std::size_t backlog_at_101ms = 0;
  std::size_t backlog_after_flush = 0;
  std::size_t backlog_before_flush = 99;
  std::chrono::nanoseconds elapsed{};
};

task<void> timed_producer(result_partition* out, timeline* seen) {
  const auto start = executor::current()->now();
  const bool ok = co_await out->emit(std::string("early"), 0);
  REQUIRE(ok);
  seen->backlog_at_start = out->backlog(0);
  co_await sleep_for(99ms);
  seen->backlog_at_99ms = out->backlog(0);
  co_await sleep_for(2ms);
  seen->backlog_at_101ms = out->backlog(0);
  const bool ok2 = co_await out->emit(std::string("late"), 0);
  REQUIRE(ok2);
  seen->backlog_before_flush = out->backlog(0);
  out->flush(0);
  seen->backlog_after_flush = out->backlog(0);
  seen->elapsed = executor::current()->now() - start;
  const bool finished = co_await out->finish();  // ends the flusher
  REQUIRE(finished);
}

task<void> flush_timeout_holds(network_memory* memory, timeline* seen) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 1, .flush_timeout = 100ms});
    co_await when_all(out.run_flusher(), timed_producer(&out, seen));
    auto d = drain<std::string>(out, 0);
    REQUIRE(d.records == std::vector<std::string>{"early", "late"});
    REQUIRE(d.items == "ddE");
  }
  REQUIRE(pool.in_use() == 0);
}

}  // namespace

TEST_CASE("records spanning buffers and larger than a buffer arrive intact and in order", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(spanning_records(&memory), virtual_time());
}

TEST_CASE("a flush timeout of 0 makes every record available at once", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(flush_every_record(&memory), virtual_time());
}

TEST_CASE("a 100 ms flush timeout holds a partial buffer until 100 ms of virtual time passed, or flush()",
          "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  timeline seen;
  sync_wait(flush_timeout_holds(&memory, &seen), virtual_time());
  REQUIRE(seen.backlog_at_start == 0);
  REQUIRE(seen.backlog_at_99ms == 0);   // not before the timeout
  REQUIRE(seen.backlog_at_101ms == 1);  // the flusher queued it at 100 ms
  REQUIRE(seen.backlog_before_flush == 1);
  REQUIRE(seen.backlog_after_flush == 2);  // flush() needs no timeout
  REQUIRE(seen.elapsed == 101ms);
}

namespace {

constexpr int slow_records = 40;

struct slow_seen {
  std::size_t waiters_when_blocked = 0;
  std::size_t in_use_when_blocked = 0;
  std::size_t backlog_when_blocked = 0;
  int emitted_when_blocked = -1;
  std::size_t max_in_use = 0;
  int emitted = 0;
  std::vector<std::string> received;
  bool end_seen = false;
};

task<void> fast_producer(result_partition* out, slow_seen* seen) {
  for (int i = 0; i < slow_records; ++i) {
    const bool ok = co_await out->emit(text(1000, i), 0);
    REQUIRE(ok);
    seen->emitted = i + 1;
    seen->max_in_use = std::max(seen->max_in_use, out->pool().in_use());
  }
  const bool finished = co_await out->finish();
  REQUIRE(finished);
}

task<void> slow_consumer(result_partition* out, slow_seen* seen) {
  local_buffer_pool& pool = out->pool();
  for (int turn = 0; turn < 1000 && pool.waiters() == 0; ++turn) co_await yield();
  seen->waiters_when_blocked = pool.waiters();
  seen->in_use_when_blocked = pool.in_use();
  seen->backlog_when_blocked = out->backlog(0);
  seen->emitted_when_blocked = seen->emitted;
  record_deserializer des;
  for (int guard = 0; guard < 10000 && !seen->end_seen; ++guard) {
    const bool available = co_await out->wait_available(0);
    REQUIRE(available);
    std::optional<result_partition::polled> next = out->poll_next(0);
    REQUIRE(next.has_value());
    seen->max_in_use = std::max(seen->max_in_use, pool.in_use());
    if (next->view.kind() == buffer_kind::event) {
      seen->end_seen = is_end_of_partition(next->view);
      continue;
    }
    des.set_next_buffer(std::move(next->view));
    while (auto r = des.next_record<std::string>()) seen->received.push_back(std::move(*r));
    co_await yield();  // slow: let the producer run between buffers
  }
  des.clear();
}

task<void> slow_consumer_case(network_memory* memory, slow_seen* seen) {
  local_buffer_pool pool(memory->pool(0), 2, 4);
  {
    result_partition out(pool, {.subpartitions = 1, .flush_timeout = 100ms});
    co_await when_all(fast_producer(&out, seen), slow_consumer(&out, seen));
    REQUIRE(out.queued(0) == 0);
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

}  // namespace

TEST_CASE("a slow consumer suspends the producer at the pool's maximum, and polling resumes it", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  slow_seen seen;
  sync_wait(slow_consumer_case(&memory, &seen), virtual_time());
  REQUIRE(seen.waiters_when_blocked == 1);  // the producer waits for a buffer
  REQUIRE(seen.in_use_when_blocked == 4);   // memory at the pool's maximum, not beyond
  REQUIRE(seen.backlog_when_blocked == 4);  // every buffer finished and queued for the consumer
  REQUIRE(seen.emitted_when_blocked > 0);
  REQUIRE(seen.emitted_when_blocked < slow_records);
  REQUIRE(seen.max_in_use <= 4);
  REQUIRE(seen.end_seen);
  REQUIRE(seen.received.size() == static_cast<std::size_t>(slow_records));
  for (int i = 0; i < slow_records; ++i) REQUIRE(seen.received[static_cast<std::size_t>(i)] == text(1000, i));
}

namespace {

task<void> priority_overtakes(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 16);
  {
    result_partition out(pool, {.subpartitions = 2, .flush_timeout = 100ms});
    for (const char* r : {"a", "b"}) {
      const bool ok = co_await out.emit(std::string(r), 0);
      REQUIRE(ok);
      out.flush(0);
    }
    buffer_view plain = co_await make_event(&pool, std::byte{0x11});
    out.add_event(std::move(plain), 0);
    const bool ok_c = co_await out.emit(std::string("c"), 0);
    REQUIRE(ok_c);
    out.flush(0);
    const bool ok_d = co_await out.emit(std::string("d"), 0);  // still in the partial buffer
    REQUIRE(ok_d);
    const bool ok_other = co_await out.emit(std::string("other"), 1);
    REQUIRE(ok_other);
    out.flush(1);
    REQUIRE(out.backlog(0) == 3);

    buffer_view barrier = co_await make_event(&pool, std::byte{0x42});
    std::vector<buffer_view> overtaken = out.add_priority_event(std::move(barrier), 0);
    REQUIRE(overtaken.size() == 4);  // a, b, c and the flushed partial d; not the plain event
    std::vector<std::string> overtaken_records;
    for (const auto& v : overtaken) {
      REQUIRE(v.kind() == buffer_kind::data);
      overtaken_records.push_back(single_record(v));
    }
    REQUIRE(overtaken_records == std::vector<std::string>{"a", "b", "c", "d"});
    REQUIRE(out.backlog(0) == 4);  // the buffers stay queued
    REQUIRE(out.backlog(1) == 1);  // the other subpartition is untouched

    const bool ok_e = co_await out.emit(std::string("e"), 0);
    REQUIRE(ok_e);
    out.flush(0);

    // The barrier comes first, then exactly the overtaken buffers (the same segments), then newer data.
    std::optional<result_partition::polled> first = out.poll_next(0);
    REQUIRE(first.has_value());
    REQUIRE(first->priority);
    REQUIRE(first->view.kind() == buffer_kind::event);
    REQUIRE(first->view.data()[0] == std::byte{0x42});
    REQUIRE(first->backlog == 5);
    std::string order;
    std::size_t next_overtaken = 0;
    while (auto next = out.poll_next(0)) {
      REQUIRE_FALSE(next->priority);
      if (next->view.kind() == buffer_kind::event) {
        REQUIRE(next->view.data()[0] == std::byte{0x11});
        order += '|';
        continue;
      }
      if (next_overtaken < overtaken.size()) {
        REQUIRE(next->view.data().data() == overtaken[next_overtaken].data().data());
        REQUIRE(next->view.size() == overtaken[next_overtaken].size());
        ++next_overtaken;
      }
      order += single_record(next->view);
    }
    REQUIRE(order == "ab|cde");
    REQUIRE(next_overtaken == 4);
    first.reset();
    const std::size_t in_use_with_state = pool.in_use();
    REQUIRE(in_use_with_state == 5);  // the overtaken views (4) and "other" on subpartition 1
    overtaken.clear();  // the channel-state writer is done: now they are recycled
    REQUIRE(pool.in_use() == 1);
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

task<void> priority_behind_priority(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 1, .flush_timeout = 0ms});
    const bool ok_a = co_await out.emit(std::string("a"), 0);
    REQUIRE(ok_a);
    buffer_view first = co_await make_event(&pool, std::byte{1});
    REQUIRE(out.add_priority_event(std::move(first), 0).size() == 1);
    const bool ok_b = co_await out.emit(std::string("b"), 0);
    REQUIRE(ok_b);
    buffer_view second = co_await make_event(&pool, std::byte{2});
    std::vector<buffer_view> overtaken = out.add_priority_event(std::move(second), 0);
    REQUIRE(overtaken.size() == 2);
    REQUIRE(single_record(overtaken[0]) == "a");
    REQUIRE(single_record(overtaken[1]) == "b");
    auto d = drain<std::string>(out, 0);
    REQUIRE(d.items == "ppdd");  // barriers keep their order among themselves
    REQUIRE(d.records == std::vector<std::string>{"a", "b"});
  }
  REQUIRE(pool.in_use() == 0);
}

// An in-band event stuck behind data becomes a priority event (aligned-with-timeout switching to
// unaligned): it overtakes the data queued before it, not the data after it.
task<void> promote_in_band(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 1, .flush_timeout = 0ms});
    for (const char* r : {"a", "b"}) {
      const bool ok = co_await out.emit(std::string(r), 0);
      REQUIRE(ok);
    }
    buffer_view barrier = co_await make_event(&pool, std::byte{7});
    buffer_view mine = barrier.share();
    out.add_event(std::move(barrier), 0);
    const bool ok_c = co_await out.emit(std::string("c"), 0);
    REQUIRE(ok_c);
    REQUIRE(out.event_queued(mine, 0));
    std::optional<std::vector<buffer_view>> overtaken = out.promote_event(mine, 0);
    REQUIRE(overtaken);
    REQUIRE(overtaken->size() == 2);
    REQUIRE(single_record((*overtaken)[0]) == "a");
    REQUIRE(single_record((*overtaken)[1]) == "b");
    REQUIRE_FALSE(out.promote_event(mine, 0));  // a priority event now: nothing to promote
    auto d = drain<std::string>(out, 0);
    REQUIRE(d.items == "pddd");
    REQUIRE(d.records == std::vector<std::string>{"a", "b", "c"});
    REQUIRE_FALSE(out.event_queued(mine, 0));  // sent
    overtaken.reset();
  }
  REQUIRE(pool.in_use() == 0);
}

}  // namespace

TEST_CASE("an in-band event promoted to priority overtakes only the data queued before it", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(promote_in_band(&memory), virtual_time());
}

TEST_CASE("a priority event overtakes exactly the queued data and returns it, in order, as retained views",
          "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(priority_overtakes(&memory), virtual_time());
}

TEST_CASE("a second priority event queues behind the first and overtakes everything behind it", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(priority_behind_priority(&memory), virtual_time());
}

namespace {

task<void> finish_case(network_memory* memory) {
  local_buffer_pool pool(memory->pool(0), 2, 16);
  {
    result_partition out(pool, {.subpartitions = 3, .flush_timeout = 100ms});
    for (int i = 0; i < 7; ++i) {
      const bool ok = co_await out.emit_round_robin(text(static_cast<std::size_t>(1500 * i + 1), i));
      REQUIRE(ok);
    }
    const bool finished = co_await out.finish();
    REQUIRE(finished);
    REQUIRE(out.finished());
    for (std::size_t sub = 0; sub < 3; ++sub) {
      auto d = drain<std::string>(out, sub);
      REQUIRE(!d.items.empty());
      REQUIRE(d.items.back() == 'E');
      REQUIRE(d.items.find('E') == d.items.size() - 1);  // after all data, exactly once
      std::vector<std::string> expected;
      for (int i = static_cast<int>(sub); i < 7; i += 3) expected.push_back(text(static_cast<std::size_t>(1500 * i + 1), i));
      REQUIRE(d.records == expected);
      REQUIRE_FALSE(d.partial_record_left);
    }
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

struct release_seen {
  bool woken = false;
  bool released_when_woken = false;
};

task<void> wait_for_release(result_partition* out, release_seen* seen) {
  const bool woken = co_await out->wait_available(1);
  seen->woken = woken;
  seen->released_when_woken = out->released(1);
}

task<void> release_second(result_partition* out) {
  co_await yield();
  out->release(1);
}

task<void> release_case(network_memory* memory, release_seen* seen) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 2, .flush_timeout = 0ms});
    for (int i = 0; i < 3; ++i) {
      const bool ok = co_await out.emit(std::string("x"), 0);
      REQUIRE(ok);
    }
    const bool partial_ok = co_await out.emit(std::string("y"), 1);
    REQUIRE(partial_ok);
    REQUIRE(pool.in_use() == 4);
    const std::uint64_t recycled_before = pool.recycled();
    out.release(0);
    REQUIRE(pool.recycled() - recycled_before == 3);  // its three queued buffers, once each
    REQUIRE(pool.in_use() == 1);
    out.release(0);  // idempotent
    REQUIRE(pool.recycled() - recycled_before == 3);
    REQUIRE(out.released(0));
    REQUIRE_FALSE(out.poll_next(0).has_value());
    const bool dropped_ok = co_await out.emit(std::string("z"), 0);
    REQUIRE(dropped_ok);
    REQUIRE(out.dropped_records() == 1);
    REQUIRE(pool.in_use() == 1);

    auto d = drain<std::string>(out, 1);
    REQUIRE(d.records == std::vector<std::string>{"y"});
    co_await when_all(wait_for_release(&out, seen), release_second(&out));
    REQUIRE(pool.violations() == 0);
  }
  REQUIRE(pool.in_use() == 0);
}

}  // namespace

TEST_CASE("finish() puts end-of-partition after all data on every subpartition", "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  sync_wait(finish_case(&memory), virtual_time());
}

TEST_CASE("release() recycles a subpartition's queued buffers exactly once and wakes its waiting consumer",
          "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  release_seen seen;
  sync_wait(release_case(&memory, &seen), virtual_time());
  REQUIRE(seen.woken);
  REQUIRE(seen.released_when_woken);
}

// --- a failed try_emit leaves an empty current buffer: no flush may queue it ----------------------

namespace {

struct polled_data {
  std::vector<std::string> records;
  std::size_t data_buffers = 0;
  std::size_t empty_data_buffers = 0;  // the TCP transport rejects these as malformed frames
  std::string items;
};

polled_data drain_checked(result_partition& out, std::size_t subpartition) {
  polled_data d;
  record_deserializer des;
  while (auto next = out.poll_next(subpartition)) {
    if (next->view.kind() == buffer_kind::event) {
      d.items += is_end_of_partition(next->view) ? 'E' : 'e';
      continue;
    }
    d.items += 'd';
    ++d.data_buffers;
    if (next->view.size() == 0) ++d.empty_data_buffers;
    des.set_next_buffer(std::move(next->view));
    while (auto r = des.next_record<std::string>()) d.records.push_back(std::move(*r));
  }
  des.clear();
  return d;
}

struct empty_buffer_seen {
  std::size_t queued_after_flush_due = 99;
  std::size_t queued_after_flush_all = 99;
  std::size_t queued_after_flusher = 99;
};

// Subpartition 1's empty buffer passes its deadline for flush_due(); subpartition 0's is flushed
// with flush_all(); then the flusher runs three rounds over both.
task<void> oversized_producer(result_partition* out, std::string big, empty_buffer_seen* seen) {
  local_buffer_pool& pool = out->pool();
  REQUIRE_FALSE(out->try_emit(big, 1));
  REQUIRE(pool.in_use() == 1);  // it took a buffer for the record, then found it does not fit
  co_await sleep_for(150ms);    // past that buffer's flush deadline
  REQUIRE_FALSE(out->try_emit(big, 0));
  REQUIRE(pool.in_use() == 2);
  out->flush_due();
  seen->queued_after_flush_due = out->queued(1);
  out->flush_all();
  seen->queued_after_flush_all = out->queued(0);
  co_await sleep_for(350ms);  // the flusher's rounds at 100, 200 and 300 ms
  seen->queued_after_flusher = out->queued(0) + out->queued(1);
  REQUIRE_FALSE(out->poll_next(0).has_value());
  REQUIRE_FALSE(out->poll_next(1).has_value());
  // The slow path takes the record, starting in the buffer the fast path left.
  for (std::size_t sub = 0; sub < 2; ++sub) {
    const bool ok = co_await out->emit(big, sub);
    REQUIRE(ok);
  }
  const bool finished = co_await out->finish();
  REQUIRE(finished);
}

task<void> failed_try_emit_case(network_memory* memory, empty_buffer_seen* seen) {
  local_buffer_pool pool(memory->pool(0), 2, 8);
  {
    result_partition out(pool, {.subpartitions = 2, .flush_timeout = 100ms});
    const std::string big = text(segment_bytes + 100, 5);
    co_await when_all(out.run_flusher(), oversized_producer(&out, big, seen));
    for (std::size_t sub = 0; sub < 2; ++sub) {
      INFO("subpartition " << sub);
      const polled_data d = drain_checked(out, sub);
      CHECK(d.empty_data_buffers == 0);
      CHECK(d.records == std::vector<std::string>{big});
      CHECK(d.items == "ddE");  // the record spans two buffers, then end-of-partition
    }
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

}  // namespace

TEST_CASE("a try_emit that does not fit leaves no empty buffer for flush_due, flush_all or the flusher to queue",
          "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  empty_buffer_seen seen;
  sync_wait(failed_try_emit_case(&memory, &seen), virtual_time());
  CHECK(seen.queued_after_flush_due == 0);
  CHECK(seen.queued_after_flush_all == 0);
  CHECK(seen.queued_after_flusher == 0);
}

// --- recovered output channel state: stream bytes starting inside a record ------------------------

namespace {

// Records framed as the wire format, flat; starts[i] is where record i's prefix begins.
struct flat_stream {
  std::vector<std::byte> bytes;
  std::vector<std::size_t> starts;
};

flat_stream frame(const std::vector<std::string>& records) {
  flat_stream s;
  for (const std::string& r : records) {
    s.starts.push_back(s.bytes.size());
    const std::uint32_t length = static_cast<std::uint32_t>(r.size());
    const std::size_t at = s.bytes.size();
    s.bytes.resize(at + record_length_bytes + r.size());
    std::memcpy(s.bytes.data() + at, &length, record_length_bytes);
    if (!r.empty()) std::memcpy(s.bytes.data() + at + record_length_bytes, r.data(), r.size());
  }
  return s;
}

// Sizes around the awkward ones: 0, shorter than a prefix, larger than two buffers, exactly a buffer.
std::vector<std::string> resent_records() {
  return {text(1, 1), text(0, 2), text(3000, 3), text(2 * segment_bytes + 9, 4), text(10, 5),
          text(segment_bytes - 4, 6), text(5, 7)};
}

std::string as_text(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// The consumer before the failure read the stream up to `cut` (in segment-sized buffers); yields
// its records and its deserializer's partial record.
std::vector<std::byte> read_first_part(local_buffer_pool& pool, std::span<const std::byte> part,
                                       std::vector<std::string>& out) {
  record_deserializer des;
  for (std::size_t at = 0; at < part.size(); at += segment_bytes) {
    buffer b = *pool.try_request();
    b.append(part.subspan(at, std::min(segment_bytes, part.size() - at)));
    des.set_next_buffer(b.retain());
    b.reset();
    while (auto r = des.next_record_bytes()) out.push_back(as_text(*r));
  }
  std::vector<std::byte> partial = des.partial_record();
  des.clear();
  return partial;
}

task<void> stream_bytes_case(network_memory* memory, std::vector<std::size_t> cuts) {
  local_buffer_pool pool(memory->pool(0), 2, 16);
  const std::vector<std::string> records = resent_records();
  const flat_stream stream = frame(records);
  std::vector<std::string> expected = records;
  expected.push_back("after");
  for (std::size_t cut : cuts) {
    INFO("cut at stream byte " << cut);
    const std::span<const std::byte> all(stream.bytes);
    std::vector<std::string> got;
    const std::vector<std::byte> partial = read_first_part(pool, all.first(cut), got);
    // The restarted consumer holds the half-read record; the restarted producer re-sends the rest.
    record_deserializer consumer;
    consumer.restore_partial(partial);
    {
      result_partition out(pool, {.subpartitions = 1, .flush_timeout = 100ms});
      const bool resent = co_await out.emit_stream_bytes(all.subspan(cut), 0);
      REQUIRE(resent);
      const std::string after = "after";
      const bool emitted = co_await out.emit_bytes(
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(after.data()), after.size()), 0);
      REQUIRE(emitted);
      out.flush_all();
      while (auto next = out.poll_next(0)) {
        REQUIRE(next->view.kind() == buffer_kind::data);
        REQUIRE(next->view.size() > 0);
        consumer.set_next_buffer(std::move(next->view));
        while (auto r = consumer.next_record_bytes()) got.push_back(as_text(*r));
      }
    }
    REQUIRE_FALSE(consumer.has_partial_record());
    REQUIRE(got == expected);
    REQUIRE(pool.in_use() == 0);
  }
  REQUIRE(pool.violations() == 0);
}

}  // namespace

TEST_CASE("stream bytes emitted after a cut at any offset complete the consumer's restored partial record",
          "[partition]") {
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  const flat_stream stream = frame(resent_records());
  std::vector<std::size_t> cuts{0, stream.bytes.size()};
  // Around every record start: inside its prefix, just after it, and the end of the previous one.
  for (std::size_t start : stream.starts) {
    for (std::size_t k = start == 0 ? 0 : start - 1; k <= start + record_length_bytes + 1; ++k) cuts.push_back(k);
  }
  // Around the consumer's buffer boundaries, and seeded arbitrary offsets.
  for (std::size_t b = segment_bytes; b < stream.bytes.size(); b += segment_bytes) {
    cuts.insert(cuts.end(), {b - 1, b, b + 1});
  }
  std::mt19937 rng(20261201);
  for (int i = 0; i < 60; ++i) cuts.push_back(rng() % (stream.bytes.size() + 1));
  std::erase_if(cuts, [&](std::size_t k) { return k > stream.bytes.size(); });
  sync_wait(stream_bytes_case(&memory, cuts), virtual_time());
}
