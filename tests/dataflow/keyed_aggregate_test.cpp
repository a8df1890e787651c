// keyed_aggregate (operators.hpp) keeps a state table but stays deterministic: it emits in key order
// whatever order the keys came in, a snapshot (its bytes and the table's slices written after)
// restores to the same state whatever that order, and a restored aggregate goes on from it.

#include "aggregate_support.hpp"

#include <sluice/dataflow/operators.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
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

}  // namespace

TEST_CASE("a keyed aggregate emits in key order and snapshots the same state whatever order its keys came in",
          "[dataflow][aggregate]") {
  lines out_a;
  lines out_b;
  counter a(count_words(), out_a);
  counter b(count_words(), out_b);
  const std::vector<std::string> words = {"pear", "apple", "zebra", "apple", "mango", "kiwi", "pear", "apple"};
  for (const auto& w : words) a.collect(w);
  for (auto it = words.rbegin(); it != words.rend(); ++it) b.collect(*it);
  lines out_c;
  counter c(count_words(), out_c);
  c.restore_state(full_snapshot(b));
  CHECK(c.keys() == 5);
  c.end_of_data();
  a.end_of_data();
  b.end_of_data();
  const std::vector<counted> expected = {{"apple", 3}, {"kiwi", 1}, {"mango", 1}, {"pear", 2}, {"zebra", 1}};
  CHECK(out_a.seen == expected);
  CHECK(out_b.seen == expected);
  CHECK(out_c.seen == expected);
}

TEST_CASE("a keyed aggregate restored from a snapshot goes on counting, and emits only once", "[dataflow][aggregate]") {
  lines first_out;
  counter first(count_words(), first_out);
  for (const char* w : {"b", "a", "b"}) first.collect(w);
  const std::vector<std::byte> bytes = full_snapshot(first);
  lines out;
  counter restored(count_words(), out);
  restored.restore_state(bytes);
  CHECK(restored.keys() == 2);
  restored.collect("c");
  restored.collect("a");
  const std::vector<std::byte> done_bytes = [&] {
    restored.end_of_data();
    return full_snapshot(restored);
  }();
  CHECK(out.seen == std::vector<counted>{{"a", 2}, {"b", 2}, {"c", 1}});
  lines again_out;
  counter again(count_words(), again_out);
  again.restore_state(done_bytes);
  again.end_of_data();  // it remembers it emitted
  CHECK(again_out.seen.empty());
  CHECK(again_out.ends == 1);
  CHECK_THROWS_AS(again.restore_state(std::vector<std::byte>{std::byte{2}}), std::runtime_error);
}
