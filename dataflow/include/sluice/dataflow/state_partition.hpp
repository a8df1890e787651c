#pragma once
// The storage of one key group of a state_table (state_table.hpp): a slab of cells that never move
// (chunks of 8, 16, 32, ... cells, so a cell's index stays valid while its entry lives), an
// open-addressing index (linear probing, at most 3/4 full, backward-shift deletion) of 8-byte buckets
// holding a cell's index and 32 bits of the key's hash, so a probe reads the slab only on a likely
// match and a growing index rehashes without touching a key, and the keys erased since the table's
// delta base (tombstones, for an incremental snapshot).
//
// Every cell carries two epochs (the table's snapshot counter): `stamp`, the epoch it was made in or
// last captured for (a snapshot frozen at epoch F owes a live cell whose stamp is below F), and
// `changed`, the epoch of its last write (a delta on a base frozen at epoch B owes only the cells
// changed at B or later).
//
// A table with a state TTL (state_ttl.hpp) keeps beside the cells, by cell index, the time of each
// entry's last write (`touched`); a table without one keeps nothing there.

#include <sluice/runtime/assert.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::dataflow::detail {

inline constexpr std::uint32_t dead_cell = 0xffffffffu;
inline constexpr std::size_t no_bucket = static_cast<std::size_t>(-1);

template <class K, class V>
struct state_cell {
  state_cell() noexcept {}
  ~state_cell() {
    if (live()) entry.~pair();
  }
  state_cell(const state_cell&) = delete;
  state_cell& operator=(const state_cell&) = delete;
  bool live() const noexcept { return stamp != dead_cell; }
  std::uint32_t stamp = dead_cell;  // the epoch the entry was made in or last captured for; dead: free
  std::uint32_t changed = 0;        // the epoch of its last write
  // No hash here: the bucket holds it, and a removal (rare beside lookups) computes it again. Without
  // it a cell of a std::string key and an 8-byte value is 48 bytes, not 56.
  union {
    std::pair<K, V> entry;
  };
};

struct state_bucket {
  std::uint32_t cell_plus_one = 0;  // 0: empty
  std::uint32_t hash = 0;
  std::uint32_t cell() const noexcept { return cell_plus_one - 1; }
};

template <class K, class V>
struct state_partition {
  using cell = state_cell<K, V>;
  struct tombstone {
    std::uint32_t epoch = 0;  // when the key was erased
    K key;
  };

  std::vector<std::unique_ptr<cell[]>> chunks;  // chunk k holds 8 << k cells
  std::uint32_t used = 0;                       // cells handed out so far (live or free)
  std::uint32_t live = 0;
  std::vector<std::uint32_t> free;
  std::vector<state_bucket> index;    // a power of two long, or empty
  std::vector<tombstone> erased;      // in epoch order
  std::vector<std::uint64_t> touched; // by cell: its entry's last write time (TTL tables only)

  cell& at(std::uint32_t c) const noexcept {
    const std::uint32_t shifted = c + 8;
    const int k = std::bit_width(shifted) - 4;
    return chunks[static_cast<std::size_t>(k)][shifted - (8u << k)];
  }
  std::size_t find(const K& key, std::uint32_t h) const {
    if (index.empty()) return no_bucket;
    const std::size_t mask = index.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const state_bucket& b = index[i];
      if (b.cell_plus_one == 0) return no_bucket;
      if (b.hash == h && at(b.cell()).entry.first == key) return i;
    }
  }
  std::uint32_t new_cell() {
    if (!free.empty()) {
      const std::uint32_t c = free.back();
      free.pop_back();
      return c;
    }
    SLUICE_ASSERT(used < dead_cell - 16, "a key group with 2^32 entries");
    const std::uint32_t c = used++;
    const std::uint32_t shifted = c + 8;
    const std::size_t k = static_cast<std::size_t>(std::bit_width(shifted) - 4);
    if (k == chunks.size()) chunks.push_back(std::make_unique<cell[]>(std::size_t{8} << k));
    return c;
  }
  std::uint32_t insert(const K& key, std::uint32_t h, std::uint32_t epoch) {
    if ((std::size_t{live} + 1) * 4 > index.size() * 3) grow();
    const std::uint32_t c = new_cell();
    cell& x = at(c);
    new (&x.entry) std::pair<K, V>(std::piecewise_construct, std::forward_as_tuple(key), std::forward_as_tuple());
    x.stamp = epoch;
    x.changed = epoch;
    place(state_bucket{c + 1, h});
    ++live;
    return c;
  }
  void place(state_bucket b) {
    const std::size_t mask = index.size() - 1;
    std::size_t i = b.hash & mask;
    while (index[i].cell_plus_one != 0) i = (i + 1) & mask;
    index[i] = b;
  }
  void grow() {
    std::vector<state_bucket> old = std::move(index);
    index.assign(old.empty() ? 8 : old.size() * 2, state_bucket{});
    for (const state_bucket& b : old) {
      if (b.cell_plus_one != 0) place(b);
    }
  }
  // Frees cell c (its bucket found by h, the hash its bucket holds) and closes the gap in the index.
  void remove(std::uint32_t c, std::uint32_t h) {
    const std::size_t mask = index.size() - 1;
    std::size_t i = h & mask;
    while (index[i].cell_plus_one != c + 1) i = (i + 1) & mask;
    for (std::size_t j = i;;) {
      index[i] = state_bucket{};
      std::size_t home = 0;
      do {
        j = (j + 1) & mask;
        if (index[j].cell_plus_one == 0) goto done;
        home = index[j].hash & mask;
      } while (i <= j ? (i < home && home <= j) : (i < home || home <= j));
      index[i] = index[j];
      i = j;
    }
  done:
    cell& x = at(c);
    x.entry.~pair();
    x.stamp = dead_cell;
    free.push_back(c);
    --live;
  }
  // Forgets the tombstones of erases before `epoch` (no delta that may still be written needs them).
  void forget_erased_before(std::uint32_t epoch) {
    std::size_t keep = 0;
    while (keep < erased.size() && erased[keep].epoch < epoch) ++keep;
    if (keep != 0) erased.erase(erased.begin(), erased.begin() + static_cast<std::ptrdiff_t>(keep));
  }
};

}  // namespace sluice::dataflow::detail
