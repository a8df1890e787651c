// Records written through try_emit() and emit() around timed flushes must all arrive, in order, at
// many subpartitions and a tiny flush timeout. This is the bug class of a cached write position in
// the partition (a flush of the buffer under the cursor, or the slow path writing into a buffer the
// cursor still points at, then the cursor or a later commit writing over or rolling back those
// bytes). Everything runs on virtual time, so every interleaving here is the same on every run.

#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace std::chrono_literals;
using sluice::test::virtual_time;

namespace {

constexpr std::size_t segment_bytes = 4096;

// What the consumer saw per subpartition: the records in arrival order.
struct arrivals {
  std::vector<record_deserializer> des;
  std::vector<std::vector<std::uint64_t>> records;
  std::uint64_t total = 0;
  std::size_t ends = 0;
  explicit arrivals(std::size_t n) : des(n), records(n) {}
};

// Takes everything queued so far (the producer's own executor; what a local sender does).
void drain(result_partition& out, arrivals& a) {
  for (std::size_t i = 0; i < out.subpartitions(); ++i) {
    while (auto next = out.poll_next(i)) {
      if (next->view.kind() == buffer_kind::event) {
        if (is_end_of_partition(next->view)) ++a.ends;
        continue;
      }
      a.des[i].set_next_buffer(std::move(next->view));
      while (auto r = a.des[i].next_record<std::uint64_t>()) {
        a.records[i].push_back(*r);
        ++a.total;
      }
    }
  }
}

struct script {
  std::size_t subpartitions = 0;
  std::uint64_t records = 0;
  std::uint32_t seed = 0;
  // Without the flusher the deadlines pass with the buffers still current (what a late flusher on a
  // busy executor leaves): emit() then queues due buffers itself, right after writing into them.
  bool flusher = true;
};

// Round-robin records k = 0, 1, ... (record k goes to k mod n) through try_emit, falling back to
// emit(); a seeded mix of virtual sleeps (the flusher and the deadlines fire in between), direct
// emit()s (the slow path on a buffer the fast path was writing), flush(i), flush_due(), in-band
// events and drains. Each step is a pure function of the seed.
task<void> produce(result_partition* out, arrivals* a, local_buffer_pool* events, script sc) {
  std::mt19937 rng(sc.seed);
  const std::size_t n = out->subpartitions();
  std::size_t ch = 0;
  for (std::uint64_t k = 0; k < sc.records; ++k) {
    const unsigned roll = rng() % 1000;
    if (roll < 5) {
      co_await sleep_for(1ms);  // past every deadline: the flusher runs, emit() sees due buffers
    } else if (roll < 8) {
      co_await sleep_for(std::chrono::microseconds(300));
    } else if (roll < 10) {
      out->flush(rng() % n);
    } else if (roll < 12) {
      out->flush_due();
    } else if (roll < 13) {
      std::optional<buffer> e = events->try_request();
      if (e) {
        e->set_kind(buffer_kind::event);
        const std::byte tag{0x42};
        e->append({&tag, 1});
        buffer_view v = e->retain();
        e.reset();
        out->add_event(std::move(v), rng() % n);
      }
    }
    if (roll < 40 || (rng() % 8) == 0) drain(*out, *a);
    const bool direct = roll >= 40 && roll < 60;  // the slow path on purpose
    bool written = !direct && out->try_emit(k, ch);
    if (!written) {
      written = co_await out->emit(k, ch);
      REQUIRE(written);
    }
    if (++ch == n) ch = 0;
  }
  const bool finished = co_await out->finish();
  REQUIRE(finished);
  drain(*out, *a);
}

task<void> run_script(network_memory* memory, script sc, arrivals* a) {
  // Enough segments for every subpartition's current buffer and a few queued each: the drains keep
  // the queues short, so the producer never waits long for a buffer.
  local_buffer_pool pool(memory->pool(0), 1, 3 * sc.subpartitions + 8);
  local_buffer_pool events(memory->pool(0), 1, 64);
  {
    result_partition out(pool, {.subpartitions = sc.subpartitions, .flush_timeout = 1ms});
    if (sc.flusher) {
      co_await when_all(out.run_flusher(), produce(&out, a, &events, sc));
    } else {
      co_await produce(&out, a, &events, sc);
    }
    for (auto& d : a->des) d.clear();
  }
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
}

void check_all_arrived(const script& sc, const arrivals& a) {
  REQUIRE(a.ends == sc.subpartitions);
  CHECK(a.total == sc.records);
  for (std::size_t i = 0; i < sc.subpartitions; ++i) {
    INFO("subpartition " << i);
    const std::vector<std::uint64_t>& got = a.records[i];
    std::size_t bad = got.size();
    for (std::size_t j = 0; j < got.size(); ++j) {
      if (got[j] != i + j * sc.subpartitions) {
        bad = j;
        break;
      }
    }
    CHECK(bad == got.size());  // record j of subpartition i is i + j*n: none lost, none twice, in order
    const std::uint64_t expected = sc.records / sc.subpartitions + (i < sc.records % sc.subpartitions ? 1 : 0);
    CHECK(got.size() == expected);
  }
}

void run_case(std::size_t subpartitions, std::uint64_t records, std::uint32_t seed, bool flusher) {
  const script sc{subpartitions, records, seed, flusher};
  network_memory memory((3 * subpartitions + 128) * segment_bytes, segment_bytes, 1);
  arrivals a(subpartitions);
  sync_wait(run_script(&memory, sc, &a), virtual_time());
  check_all_arrived(sc, a);
}

}  // namespace

TEST_CASE("records written around timed 1 ms flushes all arrive in order, 1000 subpartitions", "[partition]") {
  SECTION("with the flusher") { run_case(1000, 400'000, 1, true); }
  SECTION("without it (a late flusher)") { run_case(1000, 400'000, 1, false); }
}

TEST_CASE("records written around timed 1 ms flushes all arrive in order, 7 subpartitions, three seeds",
          "[partition]") {
  for (std::uint32_t seed : {2u, 3u, 4u}) {
    INFO("seed " << seed);
    run_case(7, 200'000, seed, true);
    run_case(7, 200'000, seed, false);
  }
}

TEST_CASE("a slow-path emit after the fast path filled part of a buffer past its deadline loses nothing",
          "[partition]") {
  // The shortest form of the bug class: fast writes, the deadline passes, then emit() on the same
  // subpartition queues the buffer (its deadline is due), then fast writes again into a new buffer.
  network_memory memory(64 * segment_bytes, segment_bytes, 1);
  arrivals a(2);
  auto body = [](network_memory* m, arrivals* seen) -> task<void> {
    local_buffer_pool pool(m->pool(0), 1, 16);
    {
      result_partition out(pool, {.subpartitions = 2, .flush_timeout = 1ms});
      for (std::uint64_t k = 0; k < 10; ++k) REQUIRE(out.try_emit(k * 2, 0));
      co_await sleep_for(2ms);  // no flusher: the deadline passed, the buffer is still current
      const bool ok = co_await out.emit(std::uint64_t{20}, 0);
      REQUIRE(ok);
      REQUIRE(out.backlog(0) == 1);  // emit() queued the due buffer, with the record
      for (std::uint64_t k = 11; k < 20; ++k) {
        if (!out.try_emit(k * 2, 0)) {
          const bool slow = co_await out.emit(k * 2, 0);
          REQUIRE(slow);
        }
      }
      out.flush_all();
      const bool finished = co_await out.finish();
      REQUIRE(finished);
      drain(out, *seen);
      for (auto& d : seen->des) d.clear();
    }
    REQUIRE(pool.in_use() == 0);
  };
  sync_wait(body(&memory, &a), virtual_time());
  std::vector<std::uint64_t> expected;
  for (std::uint64_t k = 0; k < 20; ++k) expected.push_back(k * 2);
  CHECK(a.records[0] == expected);
  CHECK(a.records[1].empty());
}
