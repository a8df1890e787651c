// The end of the input in steps (collector.hpp, stepped_end; key_order_emission.hpp): a keyed
// aggregate stepped by its task emits in key order a bounded number of keys per step, a snapshot
// taken between any two steps records how far it got, and an aggregate restored from it emits
// exactly the keys after that point: the two runs' outputs together are the uninterrupted run's.

// GCC 12 warns falsely about std::string copies inlined into the tests' helpers (a bound past
// PTRDIFF_MAX it cannot rule out).
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

#include "aggregate_support.hpp"

#include <sluice/dataflow/key_order_emission.hpp>
#include <sluice/dataflow/operators.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::dataflow;

namespace {

using sluice::test::count_words;
using sluice::test::counted;
using sluice::test::counter;
using sluice::test::full_snapshot;
using sluice::test::lines;

std::string id(std::size_t i) { return "u" + std::to_string(i); }

// `keys` distinct ids in a shuffled order, some of them twice.
void feed(counter& c, std::size_t keys, std::uint64_t seed) {
  std::vector<std::size_t> order(keys);
  for (std::size_t i = 0; i < keys; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::size_t i : order) c.collect(id(i));
  for (std::size_t i = 0; i < keys; i += 7) c.collect(id(i));
}

}  // namespace

TEST_CASE("key_order_emission emits what it keeps in key order at every size around its runs",
          "[dataflow][stepped]") {
  using table = state_table<std::string, std::uint64_t>;
  for (std::size_t n : {0u, 1u, 4095u, 4096u, 4097u, 9000u, 50'000u}) {
    table t("test", 128);
    for (std::size_t i = 0; i < n; ++i) t.upsert(id(i)) = i;
    detail::key_order_emission<table> e;
    e.start();
    std::vector<std::string> got;
    std::size_t steps = 0;
    const auto keep = [&](table::ref r) { return t.value(r) % 5 != 3; };
    const auto emit = [&](table::ref r) { got.push_back(t.key(r)); };
    while (!e.step(t, 1024, keep, emit)) ++steps;
    CHECK_FALSE(e.active());
    std::vector<std::string> expected;
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 5 != 3) expected.push_back(id(i));
    }
    std::sort(expected.begin(), expected.end());
    CHECK(got == expected);
    CHECK(steps >= expected.size() / 1024);  // no step emits more than its budget
  }
}

TEST_CASE("a stepped keyed aggregate emits in bounded steps, and end_of_data goes on once the last is emitted",
          "[dataflow][stepped]") {
  lines out;
  counter agg(count_words(), out);
  agg.step_by_task();
  feed(agg, 10'000, 1);
  agg.end_of_data();
  CHECK(agg.ending());
  CHECK(out.seen.empty());
  std::size_t steps = 0;
  while (agg.ending()) {
    const std::size_t before = out.seen.size();
    agg.continue_end();
    CHECK(out.seen.size() - before <= sluice::runtime::pace_budget);
    ++steps;
  }
  CHECK(steps > 10'000 / sluice::runtime::pace_budget);
  CHECK(out.ends == 1);
  REQUIRE(out.seen.size() == 10'000);
  CHECK(std::is_sorted(out.seen.begin(), out.seen.end()));
  agg.end_of_data();  // emitted: only the end goes on
  CHECK(out.seen.size() == 10'000);
  CHECK(out.ends == 2);
}

TEST_CASE("a snapshot between any two steps of the emission restores to emit exactly the keys after the last emitted",
          "[dataflow][stepped]") {
  constexpr std::size_t keys = 12'000;
  lines whole;
  counter reference(count_words(), whole);
  feed(reference, keys, 2);
  reference.end_of_data();  // by hand: all at once
  REQUIRE(whole.seen.size() == keys);

  lines first;
  counter agg(count_words(), first);
  agg.step_by_task();
  feed(agg, keys, 3);  // another order: the same state
  agg.end_of_data();
  std::size_t step = 0;
  for (;;) {
    const std::vector<std::byte> bytes = full_snapshot(agg);
    const std::size_t emitted = first.seen.size();
    lines rest;
    counter restored(count_words(), rest);
    restored.restore_state(bytes);
    CHECK(restored.keys() == keys);
    restored.end_of_data();  // the input's end again, after the recovery
    std::vector<counted> both = first.seen;
    both.insert(both.end(), rest.seen.begin(), rest.seen.end());
    INFO("step " << step << ", " << emitted << " emitted before the snapshot");
    CHECK(both == whole.seen);
    CHECK(rest.ends == 1);
    // A snapshot of the restored one, now done, emits nothing more.
    counter again(count_words(), rest);
    again.restore_state(full_snapshot(restored));
    again.end_of_data();
    CHECK(rest.seen.size() == keys - emitted);
    if (!agg.ending()) break;
    agg.continue_end();
    ++step;
  }
  CHECK(first.seen == whole.seen);
  CHECK(step > 3);
}

TEST_CASE("a snapshot mid-emission restored and stepped again can be snapshotted mid-way again", "[dataflow][stepped]") {
  constexpr std::size_t keys = 9'000;
  lines whole;
  counter reference(count_words(), whole);
  feed(reference, keys, 4);
  reference.end_of_data();

  std::vector<counted> published;
  lines out1;
  counter a(count_words(), out1);
  a.step_by_task();
  feed(a, keys, 5);
  a.end_of_data();
  for (int i = 0; i < 3; ++i) a.continue_end();
  const std::vector<std::byte> first = full_snapshot(a);
  published = out1.seen;
  // Recovered: the end comes again; two steps, then another snapshot, another recovery.
  lines out2;
  counter b(count_words(), out2);
  b.step_by_task();
  b.restore_state(first);
  b.end_of_data();
  b.continue_end();
  b.continue_end();
  const std::vector<std::byte> second = full_snapshot(b);
  published.insert(published.end(), out2.seen.begin(), out2.seen.end());
  lines out3;
  counter c(count_words(), out3);
  c.restore_state(second);
  c.end_of_data();
  published.insert(published.end(), out3.seen.begin(), out3.seen.end());
  CHECK(published == whole.seen);
  CHECK(out3.ends == 1);
}
