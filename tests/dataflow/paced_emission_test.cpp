// A keyed operator's long synchronous loops (emitting every key at the end of the input or when a
// window fires, sorting them first, restoring a large table) pace themselves with
// runtime::pace_point: on a fiber the executor runs its other coroutines between slices, off a fiber
// nothing changes (docs/state.md, "Emission and restore in slices"). A ticker on the same executor
// counts the turns it got: by construction (pacing counts work, not time), not by a clock.

#include <sluice/dataflow/operators.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/when_all.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
namespace rt = sluice::runtime;

namespace {

using counted = std::pair<std::string, std::uint64_t>;
using counter = keyed_aggregate<std::string, std::string, std::uint64_t, counted>;
using windowed = std::tuple<std::uint64_t, std::string, std::uint64_t>;
using event = std::pair<std::uint64_t, std::string>;  // (time, key)

template <class T>
struct recorded final : collector<T> {
  std::vector<T> seen;
  int ends = 0;
  void collect(const T& c) override { seen.push_back(c); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override { ++ends; }
};

counter::functions count_words() {
  return {[](const std::string& w) { return w; }, [](std::uint64_t& n, const std::string&) { ++n; },
          [](const std::string& w, const std::uint64_t& n) { return counted(w, n); }};
}

std::string id(std::size_t i) { return "user-" + std::to_string(i * 7919 % 1000003); }

// Yields to the next turn of the executor until *done, counting the turns it got (one a turn:
// yield() alone would run it again and again within one turn).
rt::task<void> ticker(const bool* done, std::size_t* turns) {
  while (!*done) {
    co_await rt::yield_to_io();
    ++*turns;
  }
}

// Runs fn on a fiber beside the ticker; the turns the ticker got while fn ran.
template <class F>
rt::task<std::size_t> beside_ticker(F fn) {
  bool done = false;
  std::size_t turns = 0;
  bool* done_at = &done;
  auto on_fiber = rt::run_fiber([fn, done_at] {
    fn();
    *done_at = true;
  });
  co_await rt::when_all(std::move(on_fiber), ticker(&done, &turns));
  co_return turns;
}

}  // namespace

TEST_CASE("paced_sort sorts as std::sort does at every size around its runs", "[dataflow][paced]") {
  std::mt19937_64 rng(7);
  for (std::size_t n : {0u, 1u, 2u, 1023u, 1024u, 1025u, 2048u, 3000u, 70000u}) {
    std::vector<std::uint32_t> v(n);
    for (auto& x : v) x = static_cast<std::uint32_t>(rng() % (n / 3 + 1));  // duplicates too
    std::vector<std::uint32_t> expected = v;
    std::sort(expected.begin(), expected.end());
    detail::paced_sort(v, std::less<>{});
    CHECK(v == expected);
  }
}

TEST_CASE("pace_point off a fiber only counts and on a fiber yields once per budget of work", "[dataflow][paced]") {
  for (std::size_t i = 0; i < 10 * rt::pace_budget; ++i) rt::pace_point();  // no fiber: returns at once
  auto paced = beside_ticker([] {
    for (std::size_t i = 0; i < 20 * rt::pace_budget; ++i) rt::pace_point();
  });
  const std::size_t turns = rt::sync_wait(std::move(paced));
  // 20 yields (the first may come early: the thread's count carried over), each one ticker turn.
  CHECK(turns >= 19);
  CHECK(turns <= 22);
}

TEST_CASE("a keyed aggregate over 200,000 keys emits at the end of its input in paced slices, in key order",
          "[dataflow][paced]") {
  constexpr std::size_t keys = 200'000;
  recorded<counted> out;
  counter agg(count_words(), out);
  for (std::size_t i = 0; i < keys; ++i) agg.collect(id(i));
  agg.collect(id(5));
  counter* at = &agg;
  auto emitted = beside_ticker([at] { at->end_of_data(); });
  const std::size_t turns = rt::sync_wait(std::move(emitted));
  // The sort (about n/4 + n·log2(n/1024)/8 of work) and the emission (n) each yield every
  // pace_budget: hundreds of turns where the unpaced emission gave the ticker none.
  CHECK(turns >= keys / rt::pace_budget);
  REQUIRE(out.seen.size() == keys);
  CHECK(out.ends == 1);
  CHECK(std::is_sorted(out.seen.begin(), out.seen.end()));
  CHECK(std::adjacent_find(out.seen.begin(), out.seen.end(),
                           [](const counted& a, const counted& b) { return a.first == b.first; }) == out.seen.end());
  const auto five = std::find_if(out.seen.begin(), out.seen.end(), [](const counted& c) { return c.first == id(5); });
  REQUIRE(five != out.seen.end());
  CHECK(five->second == 2);
}

TEST_CASE("a tumbling window over 100,000 keys fires in paced slices and a large table restores in paced slices",
          "[dataflow][paced]") {
  constexpr std::size_t keys = 100'000;
  using window_op = tumbling_window_aggregate<std::string, event, std::uint64_t, windowed>;
  window_op::functions fns{[](const event& e) { return e.first; }, [](const event& e) { return e.second; },
                           [](std::uint64_t& n, const event&) { ++n; },
                           [](std::uint64_t start, const std::string& k, const std::uint64_t& n) {
                             return windowed(start, k, n);
                           }};
  recorded<windowed> out;
  window_op w(100, fns, out);
  for (std::size_t i = 0; i < keys; ++i) w.collect(event(i % 100, id(i)));
  // A snapshot of the full table, restored into a fresh operator on a fiber.
  std::vector<std::byte> bytes = w.snapshot_state();
  if (auto rest = w.snapshot_rest(sluice::snapshot::no_checkpoint)) {
    while (!rest->next_slice(bytes, 1 << 16)) {
    }
  }
  recorded<windowed> restored_out;
  window_op restored(100, fns, restored_out);
  window_op* into = &restored;
  const std::vector<std::byte>* from = &bytes;
  auto restoring = beside_ticker([into, from] { into->restore_state(*from); });
  CHECK(rt::sync_wait(std::move(restoring)) >= keys / rt::pace_budget);

  window_op* fired = &restored;
  auto firing = beside_ticker([fired] { fired->watermark(1000); });
  CHECK(rt::sync_wait(std::move(firing)) >= keys / rt::pace_budget);
  w.watermark(1000);  // unpaced (no fiber): the same rows
  REQUIRE(restored_out.seen.size() == keys);
  CHECK(restored_out.seen == out.seen);
  CHECK(std::is_sorted(out.seen.begin(), out.seen.end()));
}
