// state_table's incremental snapshots (state_table.hpp): once a checkpoint the table froze for is
// confirmed complete, the next snapshot holds only what changed since (written keys and erased
// ones), and a restore reads the chain oldest first. Checked against a model under random writes,
// erases, freezes written slice by slice between writes, checkpoints that never complete and
// confirmations that come late; and the faults a recovery must refuse.

#include <sluice/dataflow/state_table.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

using sluice::dataflow::state_table;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

namespace {

using table = state_table<std::uint64_t, std::string>;
using model = std::map<std::uint64_t, std::string>;

model contents(const table& t) {
  model out;
  t.for_each([&](const std::uint64_t& k, const std::string& v) { out.emplace(k, v); });
  return out;
}

std::vector<std::byte> drain(ss::deferred_state& s, std::size_t budget) {
  std::vector<std::byte> out;
  while (!s.next_slice(out, budget)) {
  }
  return out;
}

void restore(table& t, const std::vector<std::byte>& bytes) {
  bf::byte_reader r(bytes);
  t.restore(r);
  CHECK(r.remaining() == 0);
}

// A checkpoint as the task's file holds it: the stream and the base it names.
struct written_snapshot {
  std::vector<std::byte> bytes;
  ss::checkpoint_id base = ss::no_checkpoint;
  model at_freeze;
};

// Restores checkpoint `id` as recovery does: the chain of bases first, oldest first.
model recover(const std::map<ss::checkpoint_id, written_snapshot>& files, ss::checkpoint_id id, std::size_t* links = nullptr) {
  std::vector<ss::checkpoint_id> chain{id};
  while (files.at(chain.back()).base != ss::no_checkpoint) chain.push_back(files.at(chain.back()).base);
  table t("test", 16);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) restore(t, files.at(*it).bytes);
  if (links != nullptr) *links = chain.size();
  return contents(t);
}

}  // namespace

TEST_CASE("a snapshot after a confirmed one holds only the keys written and erased since", "[dataflow][state]") {
  table t("test", 16);
  for (std::uint64_t k = 0; k < 100000; ++k) t.upsert(k) = "value " + std::to_string(k);
  auto first = t.freeze(1);
  CHECK(first->delta_base() == ss::no_checkpoint);
  const auto whole = drain(*first, 1 << 16);
  t.confirm(1);
  t.upsert(7) = "seven";
  t.upsert(100001) = "new";
  t.erase(99);
  auto second = t.freeze(2);
  CHECK(second->delta_base() == 1);
  const auto delta = drain(*second, 1 << 16);
  CHECK(delta.size() < 200);
  CHECK(whole.size() > 100000 * 8);

  table back("test", 16);
  restore(back, whole);
  restore(back, delta);
  CHECK(contents(back) == contents(t));
  CHECK(back.find(99) == nullptr);
  CHECK(*back.find(7) == "seven");
}

TEST_CASE("a delta restored onto another state than its base is refused as lost or misordered", "[dataflow][state]") {
  table t("test", 8);
  for (std::uint64_t k = 0; k < 100; ++k) t.upsert(k) = "v";
  const auto whole = drain(*t.freeze(3), 64);
  t.confirm(3);
  t.upsert(1) = "w";
  const auto delta4 = drain(*t.freeze(4), 64);
  t.confirm(4);
  t.upsert(2) = "x";
  const auto delta5 = drain(*t.freeze(5), 64);

  table alone("test", 8);
  bf::byte_reader r(delta5);
  REQUIRE_THROWS_WITH(alone.restore(r), Catch::Contains("delta on checkpoint 4") && Catch::Contains("lost or misordered"));
  table skipped("test", 8);
  restore(skipped, whole);
  bf::byte_reader r2(delta5);
  REQUIRE_THROWS_WITH(skipped.restore(r2), Catch::Contains("checkpoint 3's"));
  table ok("test", 8);
  restore(ok, whole);
  restore(ok, delta4);
  restore(ok, delta5);
  CHECK(contents(ok) == contents(t));
}

TEST_CASE("a chain of deltas ends at its longest length with a whole snapshot", "[dataflow][state]") {
  table t("test", 4);
  std::vector<ss::checkpoint_id> bases;
  for (ss::checkpoint_id id = 1; id <= 2 * sluice::dataflow::detail::max_chain_deltas + 2; ++id) {
    t.upsert(id) = "k";
    auto s = t.freeze(id);
    bases.push_back(s->delta_base());
    drain(*s, 64);
    t.confirm(id);
  }
  CHECK(bases[0] == ss::no_checkpoint);
  for (std::size_t i = 1; i <= sluice::dataflow::detail::max_chain_deltas; ++i) CHECK(bases[i] == i);
  CHECK(bases[sluice::dataflow::detail::max_chain_deltas + 1] == ss::no_checkpoint);
  CHECK(bases[sluice::dataflow::detail::max_chain_deltas + 2] == sluice::dataflow::detail::max_chain_deltas + 2);
}

TEST_CASE("after a restore the next snapshot is a delta on the checkpoint restored", "[dataflow][state]") {
  table t("test", 8);
  for (std::uint64_t k = 0; k < 1000; ++k) t.upsert(k) = "v";
  std::map<ss::checkpoint_id, written_snapshot> files;
  auto s = t.freeze(5);
  files[5] = {drain(*s, 128), s->delta_base(), contents(t)};
  t.confirm(5);

  table resumed("test", 8);
  restore(resumed, files[5].bytes);
  resumed.erase(10);
  resumed.upsert(2000) = "new";
  auto next = resumed.freeze(6);
  CHECK(next->delta_base() == 5);
  files[6] = {drain(*next, 128), next->delta_base(), contents(resumed)};
  CHECK(files[6].bytes.size() < 100);
  CHECK(recover(files, 6) == contents(resumed));
}

TEST_CASE("a table with deltas off writes every snapshot whole", "[dataflow][state]") {
  table t("test", 8);
  t.set_incremental(false);
  t.upsert(1) = "a";
  drain(*t.freeze(1), 64);
  t.confirm(1);
  t.upsert(2) = "b";
  auto s = t.freeze(2);
  CHECK(s->delta_base() == ss::no_checkpoint);
  table back("test", 8);
  restore(back, drain(*s, 64));
  CHECK(contents(back) == contents(t));
}

// Random writes and erases; a freeze every so often, written in slices between further writes; some
// checkpoints never complete (the task crashed, or a later freeze subsumed them), and confirmations
// come after the next freeze at times. Every completed checkpoint, read back as recovery reads its
// chain, equals the table at its freeze.
TEST_CASE("random incremental snapshots read back as recovery reads chains, equal to the table at each freeze", "[dataflow][state]") {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    table t("test", 16);
    std::map<ss::checkpoint_id, written_snapshot> files;
    std::vector<ss::checkpoint_id> completed;
    ss::checkpoint_id awaiting_confirm = ss::no_checkpoint;  // written, not yet confirmed
    std::unique_ptr<ss::deferred_state> writing;
    ss::checkpoint_id writing_id = 0;
    std::vector<std::byte> writing_bytes;
    model writing_model;
    const std::uint64_t keys = 50 + rng() % 2000;
    for (int step = 0; step < 20000; ++step) {
      const std::uint64_t k = rng() % keys;
      const auto op = rng() % 100;
      if (op < 55) {
        t.upsert(k) = std::to_string(step);
      } else if (op < 80) {
        t.erase(k);
      } else if (op < 88 && writing) {
        if (writing->next_slice(writing_bytes, 32 + rng() % 4096)) {
          files[writing_id] = {std::move(writing_bytes), writing->delta_base(), std::move(writing_model)};
          writing.reset();
          writing_bytes.clear();
          if (rng() % 5 != 0) awaiting_confirm = writing_id;  // else: never completes
        }
      } else if (op < 89) {
        // A freeze (subsuming a snapshot still being written: that checkpoint never completes).
        ++writing_id;
        writing = t.freeze(writing_id);
        writing_bytes.clear();
        writing_model = contents(t);
      } else if (op < 95 && awaiting_confirm != ss::no_checkpoint) {
        t.confirm(awaiting_confirm);
        completed.push_back(awaiting_confirm);
        awaiting_confirm = ss::no_checkpoint;
      }
    }
    REQUIRE(completed.size() > 10);
    std::size_t longest = 0;
    for (const ss::checkpoint_id id : completed) {
      CAPTURE(id);
      std::size_t links = 0;
      const model got = recover(files, id, &links);
      if (got != files.at(id).at_freeze) {
        for (ss::checkpoint_id at = id;; at = files.at(at).base) {
          UNSCOPED_INFO("link " << at << " base " << files.at(at).base << " bytes " << files.at(at).bytes.size());
          if (files.at(at).base == ss::no_checkpoint) break;
        }
        for (const auto& [k, v] : files.at(id).at_freeze) {
          auto it = got.find(k);
          if (it == got.end()) { UNSCOPED_INFO("missing " << k << " = " << v); }
          else if (it->second != v) { UNSCOPED_INFO("differs " << k << ": " << it->second << " vs " << v); }
        }
        for (const auto& [k, v] : got) if (!files.at(id).at_freeze.contains(k)) { UNSCOPED_INFO("extra " << k << " = " << v); }
      }
      CHECK(got == files.at(id).at_freeze);
      // A chain is only of completed checkpoints.
      for (ss::checkpoint_id at = id; files.at(at).base != ss::no_checkpoint; at = files.at(at).base) {
        CHECK(std::find(completed.begin(), completed.end(), files.at(at).base) != completed.end());
      }
      longest = std::max(longest, links);
    }
    CHECK(longest > 1);
    CHECK(longest <= sluice::dataflow::detail::max_chain_deltas + 1);
  }
}

TEST_CASE("a table that never snapshots keeps no erased keys, and one that does keeps them only until no delta needs them", "[dataflow][state]") {
  table t("test", 4);
  const std::string v = "v";
  for (int round = 0; round < 100; ++round) {
    for (std::uint64_t k = 0; k < 100; ++k) t.upsert(k) = v;
    for (std::uint64_t k = 0; k < 100; ++k) t.erase(k);
  }
  CHECK(t.erased_keys() == 0);
  // With a snapshot frozen and later confirmed, erases after it are kept for the delta on it, and
  // forgotten once a later confirmed snapshot is the base.
  t.upsert(1) = v;
  drain(*t.freeze(1), 64);
  t.erase(1);
  CHECK(t.erased_keys() == 1);
  t.confirm(1);
  auto delta = t.freeze(2);
  CHECK(delta->delta_base() == 1);
  drain(*delta, 64);
  t.confirm(2);
  drain(*t.freeze(3), 64);
  CHECK(t.erased_keys() == 0);
}
