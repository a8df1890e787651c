// state_table (state_table.hpp): a keyed state table by key group whose snapshot is taken in
// slices while the table changes. Checked against std::unordered_map under random operations, and a
// snapshot written slice by slice between random writes must read back as the table was at its
// freeze, exactly.

#include <sluice/dataflow/state_table.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

using sluice::dataflow::key_group_of;
using sluice::dataflow::state_table;
namespace bf = sluice::buffers;

namespace {

template <class K, class V>
std::map<K, V> contents(const state_table<K, V>& t) {
  std::map<K, V> out;
  t.for_each([&](const K& k, const V& v) { out.emplace(k, v); });
  return out;
}

// Every slice of a snapshot concatenated: what the state file holds.
std::vector<std::byte> drain(sluice::snapshot::deferred_state& s, std::size_t budget) {
  std::vector<std::byte> out;
  while (!s.next_slice(out, budget)) {
  }
  return out;
}

template <class K, class V>
std::map<K, V> read_back(const std::vector<std::byte>& bytes, std::size_t groups) {
  state_table<K, V> t("test", groups);
  bf::byte_reader r(bytes);
  t.restore(r);
  CHECK(r.remaining() == 0);
  return contents(t);
}

}  // namespace

TEST_CASE("a state table finds inserts and erases as an unordered_map does", "[dataflow][state]") {
  state_table<std::uint64_t, std::uint64_t> t("test", 128);
  std::unordered_map<std::uint64_t, std::uint64_t> model;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 400000; ++i) {
    const std::uint64_t k = rng() % 50000;
    switch (rng() % 4) {
      case 0:
      case 1:
        t.upsert(k) += i;
        model[k] += i;
        break;
      case 2:
        CHECK(t.erase(k) == (model.erase(k) == 1));
        break;
      default: {
        const std::uint64_t* v = t.find(k);
        auto it = model.find(k);
        REQUIRE((v != nullptr) == (it != model.end()));
        if (v != nullptr) CHECK(*v == it->second);
      }
    }
  }
  CHECK(t.size() == model.size());
  const auto all = contents(t);
  CHECK(all == std::map<std::uint64_t, std::uint64_t>(model.begin(), model.end()));
}

TEST_CASE("a state table puts each key in its key group and its refs stay valid while it grows", "[dataflow][state]") {
  state_table<std::string, int> t("test", 16);
  auto [first, inserted] = t.emplace("first");
  REQUIRE(inserted);
  t.modify(first) = 1;
  for (int i = 0; i < 100000; ++i) t.upsert("key-" + std::to_string(i)) = i;
  CHECK(t.key(first) == "first");
  CHECK(t.value(first) == 1);
  CHECK(first.group == key_group_of(std::string("first"), 16));
  for (const auto& r : t.refs()) CHECK(r.group == key_group_of(t.key(r), 16));
}

TEST_CASE("a snapshot written in slices while the table changes holds the table as it was at the freeze",
          "[dataflow][state]") {
  const std::size_t budget = GENERATE(64, 4096, 1 << 20);
  state_table<std::string, std::uint64_t> t("test", 32);
  std::map<std::string, std::uint64_t> model;
  std::mt19937_64 rng(budget);
  auto step = [&] {
    char name[16];  // not "k" + std::to_string(...): a false -Wstringop-overflow in GCC 12
    std::snprintf(name, sizeof name, "k%u", static_cast<unsigned>(rng() % 3000));
    const std::string k(name);
    if (rng() % 5 == 0) {
      t.erase(k);
      model.erase(k);
    } else {
      t.upsert(k) += 1;
      model[k] += 1;
    }
  };
  for (int i = 0; i < 20000; ++i) step();
  for (int round = 0; round < 5; ++round) {
    const std::map<std::string, std::uint64_t> at_freeze = model;
    auto snapshot = t.freeze();
    std::vector<std::byte> bytes;
    while (!snapshot->next_slice(bytes, budget)) {
      for (int i = 0; i < 50; ++i) step();
    }
    CHECK_FALSE(t.snapshot_ongoing());
    CHECK(read_back<std::string, std::uint64_t>(bytes, 32) == at_freeze);
    CHECK(contents(t) == model);
  }
}

TEST_CASE("a freeze abandons the snapshot still being written and the next one is whole", "[dataflow][state]") {
  state_table<std::uint64_t, std::uint64_t> t("test", 8);
  for (std::uint64_t k = 0; k < 10000; ++k) t.upsert(k) = k;
  auto first = t.freeze();
  std::vector<std::byte> partial;
  CHECK_FALSE(first->next_slice(partial, 256));
  t.upsert(5) = 500;  // captured for the first
  auto second = t.freeze();
  std::vector<std::byte> nothing;
  CHECK(first->next_slice(nothing, 256));  // abandoned: ends with nothing more
  CHECK(nothing.empty());
  CHECK(first->abandoned());  // and says so: its checkpoint must not finish
  CHECK_FALSE(second->abandoned());
  t.upsert(6) = 600;
  const auto bytes = drain(*second, 1024);
  CHECK_FALSE(second->abandoned());  // ended whole
  const auto back = read_back<std::uint64_t, std::uint64_t>(bytes, 8);
  CHECK(back.size() == 10000);
  CHECK(back.at(5) == 500);
  CHECK(back.at(6) == 6);
  first.reset();  // an abandoned snapshot's end changes nothing
  CHECK_FALSE(t.snapshot_ongoing());
}

TEST_CASE("a snapshot given up before its end stops capturing and the table outlives it or not", "[dataflow][state]") {
  auto t = std::make_unique<state_table<std::uint64_t, std::uint64_t>>("test", 8);
  for (std::uint64_t k = 0; k < 1000; ++k) t->upsert(k) = k;
  {
    auto dropped = t->freeze();
    std::vector<std::byte> some;
    CHECK_FALSE(dropped->next_slice(some, 64));
    CHECK(t->snapshot_ongoing());
  }
  CHECK_FALSE(t->snapshot_ongoing());
  auto orphan = t->freeze();
  t.reset();
  std::vector<std::byte> out;
  CHECK(orphan->next_slice(out, 64));
  CHECK(out.empty());
}

TEST_CASE("an empty table snapshots to its header and the terminator alone and restores bad bytes with an error", "[dataflow][state]") {
  state_table<std::uint64_t, std::uint64_t> t("keyed thing", 4);
  const auto bytes = drain(*t.freeze(), 64);
  CHECK(bytes.size() == 4 + 8 + 4);  // whole-state marker, checkpoint, terminator
  CHECK(read_back<std::uint64_t, std::uint64_t>(bytes, 4).empty());

  for (std::uint64_t k = 0; k < 100; ++k) t.upsert(k) = k;
  const auto full = drain(*t.freeze(), 1 << 20);
  // A stage with fewer key groups than the state was written for.
  state_table<std::uint64_t, std::uint64_t> fewer("keyed thing", 2);
  bf::byte_reader r(full);
  CHECK_THROWS_WITH(fewer.restore(r), Catch::Contains("restore keyed thing") && Catch::Contains("key group"));
  // Cut short.
  std::vector<std::byte> cut(full.begin(), full.end() - 6);
  state_table<std::uint64_t, std::uint64_t> other("keyed thing", 4);
  bf::byte_reader rc(cut);
  CHECK_THROWS_AS(other.restore(rc), std::runtime_error);
}
