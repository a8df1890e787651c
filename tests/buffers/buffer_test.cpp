#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/engine.hpp>

#include <support/death.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <optional>
#include <thread>

using namespace sluice::buffers;
using namespace sluice::runtime;

TEST_CASE("a double recycle aborts the process in every build unless a test turned the check off", "[buffer]") {
  const auto end = sluice::test::run_in_child([] {
    network_memory memory(4 * 4096, 4096, 1);
    local_buffer_pool pool(memory.pool(0), 1, 2);
    std::byte* segment = pool.try_request()->detach();
    pool.recycle(segment);
    pool.recycle(segment);  // aborts here
  });
  CHECK(end.aborted);
  CHECK(end.stderr_text.find("double recycle of a segment") != std::string::npos);
  CHECK(end.stderr_text.find("buffer_pool.cpp:") != std::string::npos);
}

TEST_CASE("a segment given back to its executor's segment pool twice aborts the process", "[buffer]") {
  const auto end = sluice::test::run_in_child([] {
    network_memory memory(4 * 4096, 4096, 1);
    std::byte* segment = memory.pool(0).take();
    memory.pool(0).give(segment);
    memory.pool(0).give(segment);  // aborts here
  });
  CHECK(end.aborted);
  CHECK(end.stderr_text.find("given back twice") != std::string::npos);
}

namespace {
std::span<const std::byte> bytes_of(const char* s) { return {reinterpret_cast<const std::byte*>(s), std::strlen(s)}; }
std::string text_of(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }
}  // namespace

TEST_CASE("a buffer appends up to its capacity and reports what it holds", "[buffer]") {
  network_memory memory(2 * 4096, 4096, 1);
  local_buffer_pool pool(memory.pool(0), 1, 1);
  buffer b = *pool.try_request();
  REQUIRE(b.kind() == buffer_kind::data);
  REQUIRE(b.append(bytes_of("hello")) == 5);
  REQUIRE(b.size() == 5);
  REQUIRE(b.remaining() == 4091);
  std::memset(b.writable().data(), 'x', 10);
  b.commit(10);
  REQUIRE(text_of(b.data()) == "helloxxxxxxxxxx");
  std::vector<std::byte> big(5000, std::byte{'y'});
  REQUIRE(b.append(big) == 4096 - 15);
  REQUIRE(b.full());
  b.set_kind(buffer_kind::event);
  buffer moved = std::move(b);
  REQUIRE_FALSE(b.valid());
  REQUIRE(moved.kind() == buffer_kind::event);
  REQUIRE(pool.in_use() == 1);
  moved.reset();
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.recycled() == 1);
}

TEST_CASE("views keep a segment out of the pool until the last view is gone", "[buffer]") {
  network_memory memory(2 * 4096, 4096, 1);
  local_buffer_pool pool(memory.pool(0), 1, 1);
  buffer b = *pool.try_request();
  b.append(bytes_of("channel state"));
  buffer_view whole = b.retain();
  buffer_view part = whole.slice(8, 5);
  buffer_view head = b.slice(0, 7);
  b.reset();  // the task moves on; the writer still holds views
  REQUIRE(pool.in_use() == 1);
  REQUIRE(pool.recycled() == 0);
  REQUIRE_FALSE(pool.try_request().has_value());
  REQUIRE(text_of(whole.data()) == "channel state");
  REQUIRE(text_of(part.data()) == "state");
  REQUIRE(text_of(head.data()) == "channel");
  whole.reset();
  head.reset();
  REQUIRE(pool.recycled() == 0);
  buffer_view copy = part.share();
  part.reset();
  REQUIRE(pool.recycled() == 0);
  REQUIRE(text_of(copy.data()) == "state");
  copy.reset();
  REQUIRE(pool.recycled() == 1);
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.available() == 1);
  REQUIRE(pool.violations() == 0);
}

TEST_CASE("a double recycle, a recycle into the wrong pool and a foreign segment are caught", "[buffer]") {
  network_memory memory(4 * 4096, 4096, 1);
  network_memory other(4096, 4096, 1);
  local_buffer_pool pool(memory.pool(0), 1, 2);
  local_buffer_pool second(memory.pool(0), 1, 1);
  pool.set_assert_on_violation(false);
  second.set_assert_on_violation(false);

  std::byte* segment = pool.try_request()->detach();  // the handle gives it up without recycling
  REQUIRE(pool.in_use() == 1);
  second.recycle(segment);
  REQUIRE(second.violations() == 1);  // not lent by `second`
  REQUIRE(second.available() == 1);
  pool.recycle(segment);
  REQUIRE(pool.violations() == 0);
  REQUIRE(pool.recycled() == 1);
  const std::size_t available = pool.available();
  pool.recycle(segment);  // twice
  REQUIRE(pool.violations() == 1);
  REQUIRE(pool.recycled() == 1);
  REQUIRE(pool.available() == available);  // the bookkeeping was not corrupted

  std::byte* stranger = other.pool(0).take();
  pool.recycle(stranger);
  REQUIRE(pool.violations() == 2);
  other.pool(0).give(stranger);
}

namespace {

struct foreign_seen {
  bool started_home = false;
  std::uint64_t recycled_after_home_drop = 99;
  std::uint64_t recycled = 0;
  std::uint64_t recycled_later = 0;
  std::uint64_t foreign_releases = 0;
  std::size_t in_use = 99;
  std::size_t available = 0;
  std::uint64_t violations = 99;
  std::string read_away;
};

// Waits (bounded) on `home` until the pool has recycled `count` segments.
task<void> until_recycled(local_buffer_pool* pool, std::uint64_t count) {
  for (int turn = 0; turn < 100000 && pool->recycled() < count; ++turn) co_await yield();
}

task<void> release_away(engine* eng, network_memory* memory, foreign_seen* seen) {
  executor& home = eng->at(0);
  executor& away = eng->at(1);
  seen->started_home = executor::current() == &home;
  local_buffer_pool pool(memory->pool(0), 1, 2);

  // A handle released on the foreign executor.
  std::optional<buffer> b = pool.try_request();
  b->append(std::as_bytes(std::span("crossing")));
  co_await switch_to(away);
  b.reset();  // posts the release home; the count is not touched here
  co_await switch_to(home);
  co_await until_recycled(&pool, 1);

  // A view released away while the handle is dropped at home: recycled once, after both.
  std::optional<buffer> c = pool.try_request();
  c->append(bytes_of("view"));
  buffer_view v = c->retain();
  c.reset();
  seen->recycled_after_home_drop = pool.recycled();
  co_await switch_to(away);
  seen->read_away = text_of(v.data());
  v.reset();
  co_await switch_to(home);
  co_await until_recycled(&pool, 2);

  // A buffer released on a plain thread, not an executor.
  std::optional<buffer> d = pool.try_request();
  std::thread([moved = std::move(*d)]() mutable { moved.reset(); }).join();
  co_await until_recycled(&pool, 3);

  seen->recycled = pool.recycled();
  for (int i = 0; i < 100; ++i) co_await yield();  // nothing more may arrive
  seen->recycled_later = pool.recycled();
  seen->foreign_releases = pool.foreign_releases();
  seen->in_use = pool.in_use();
  seen->available = pool.available();
  seen->violations = pool.violations();
}

}  // namespace

TEST_CASE("a buffer released on a foreign executor is recycled by its owner exactly once (scenario 16)",
          "[buffer]") {
  network_memory memory(8 * 4096, 4096, 2);
  foreign_seen seen;
  {
    engine eng(engine_options{.executors = 2, .handle_signals = false});
    eng.block_on(release_away(&eng, &memory, &seen));
  }
  // Asserted here, on the test's thread, not on the executors.
  REQUIRE(seen.started_home);
  REQUIRE(seen.violations == 0);
  REQUIRE(seen.recycled_after_home_drop == 1);  // the view kept it out of the pool
  REQUIRE(seen.read_away == "view");
  REQUIRE(seen.recycled == 3);
  REQUIRE(seen.recycled_later == 3);
  REQUIRE(seen.foreign_releases == 3);
  REQUIRE(seen.in_use == 0);
  REQUIRE(seen.available == 1);
  REQUIRE(seen.violations == 0);
  REQUIRE(memory.pool(0).free_segments() == 4);
}
