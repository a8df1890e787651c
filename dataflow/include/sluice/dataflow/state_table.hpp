#pragma once
// state_table<K, V>: the keyed state of one operator of one task, by key group (key_group.hpp),
// snapshotted without stalling the executor (docs/state.md).
//
// Layout. Each key group the task holds entries of has a partition: a slab of cells that never move
// (chunks of 8, 16, 32, ... cells, so a cell's index stays valid while its entry lives) and an
// open-addressing index (linear probing, at most 3/4 full, backward-shift deletion) of 8-byte
// buckets holding a cell's index and 32 bits of the key's hash, so a probe reads the slab only on a
// likely match and a growing index rehashes without touching a key. A key's 64-bit hash
// (key_group_hash) gives both its group (the hash mod the stage's key groups) and its bucket (the
// high 32 bits). Partitions are per group so that a group's state can be written, read and (with
// rescaling) moved on its own, and an index grows by a group's share of the state at a time.
//
// Snapshots. freeze() is the synchronous part of a checkpoint: it starts epoch F (O(groups), not
// O(state)) and returns a deferred_state (snapshot/deferred_state.hpp) that encodes the table as it
// was at the freeze, in slices, while the task goes on. Every cell carries a stamp: the epoch it was
// created in or last captured for. A cell with a stamp below F is still owed to snapshot F. The
// slices walk each group's cells and encode those owed; every write to a cell (upsert, modify,
// erase) first encodes it if it is owed ("capture before write"), so what snapshot F holds is each
// key's value at the freeze, whatever the task did since. Cells made after the freeze carry F and
// are not in it. A freeze while a snapshot is still being written abandons that one (its
// checkpoint was subsumed); its deferred_state then ends at once with nothing more.
//
// The encoded stream (what the slices append, in key group order):
//   section*  terminator
//   section    := group u32, kind u8 (0: every entry of the group), entries u32, bytes u64, entry*
//   entry      := codec<K> key, codec<V> value          (entry order within a section: any)
//   terminator := u32 0xffffffff
// All integers little-endian. restore() reads it back.
//
// Every call runs on the task's executor (the table is the operator's, and the operator is the
// task's). Nothing here locks.

#include <sluice/buffers/codec.hpp>
#include <sluice/dataflow/key_group.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/snapshot/deferred_state.hpp>

#include <bit>
#include <compare>
#include <tuple>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::dataflow {

// A key in a namespace: state of one key per window (the namespace its start) or per timer (its
// time). It belongs to its key's key group, so everything of one key moves together.
template <class K>
struct namespaced {
  K key;
  std::uint64_t space = 0;
  friend bool operator==(const namespaced&, const namespaced&) = default;
  friend auto operator<=>(const namespaced&, const namespaced&) = default;
  static constexpr auto fields() { return std::make_tuple(&namespaced::key, &namespaced::space); }
};

// How a table's key type hashes: the key whose group it belongs to, and its own hash.
template <class SK>
struct state_key_traits {
  static std::uint64_t group_hash(const SK& k) { return key_group_hash(k); }
  static std::uint64_t own_hash(const SK&, std::uint64_t group_hash) noexcept { return group_hash; }
};
template <class K>
struct state_key_traits<namespaced<K>> {
  static std::uint64_t group_hash(const namespaced<K>& k) { return key_group_hash(k.key); }
  static std::uint64_t own_hash(const namespaced<K>& k, std::uint64_t group_hash) noexcept {
    return mix_hash(group_hash ^ (k.space * 0x9e3779b97f4a7c15ull));
  }
};

namespace detail {
inline constexpr std::uint32_t state_stream_end = 0xffffffffu;
inline constexpr std::uint8_t section_full = 0;
inline void write_u64(buffers::byte_writer& w, std::uint64_t v) { buffers::codec<std::uint64_t>::encode(w, v); }
inline std::uint64_t read_u64(buffers::byte_reader& r) { return buffers::codec<std::uint64_t>::decode(r); }
}  // namespace detail

template <class K, class V>
class state_table {
 public:
  // Where an entry lives: stable while it lives (an operator's own index may keep it).
  struct ref {
    key_group group = 0;
    std::uint32_t cell = 0;
    friend bool operator==(const ref&, const ref&) = default;
  };

  // `what` names the operator in errors ("keyed aggregate"); `groups` is the stage's key groups.
  state_table(std::string what, std::size_t groups) : what_(std::move(what)), groups_(groups), partitions_(groups) {
    if (groups == 0 || groups > max_key_groups) throw std::invalid_argument(what_ + ": bad number of key groups");
  }
  ~state_table() {
    if (frozen_) frozen_->table = nullptr;
  }
  state_table(const state_table&) = delete;
  state_table& operator=(const state_table&) = delete;

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t key_groups() const noexcept { return groups_; }

  // --- reading --------------------------------------------------------------------------------
  std::optional<ref> locate(const K& key) const {
    const std::uint64_t h = traits::group_hash(key);
    const key_group g = key_group_of_hash(h, groups_);
    const partition* p = partitions_[g].get();
    if (p == nullptr) return std::nullopt;
    const std::size_t at = p->find(key, hash32(traits::own_hash(key, h)));
    if (at == npos) return std::nullopt;
    return ref{g, p->index[at].cell()};
  }
  const V* find(const K& key) const {
    const std::optional<ref> r = locate(key);
    return r ? &value(*r) : nullptr;
  }
  bool contains(const K& key) const { return locate(key).has_value(); }
  const K& key(ref r) const { return cell_of(r).entry.first; }
  const V& value(ref r) const { return cell_of(r).entry.second; }

  // Calls f(key, value) for every entry (group by group, cells in slab order).
  template <class F>
  void for_each(F&& f) const {
    for (const auto& p : partitions_) {
      if (p == nullptr) continue;
      for (std::uint32_t c = 0; c < p->used; ++c) {
        const cell& x = p->at(c);
        if (x.live()) f(x.entry.first, x.entry.second);
      }
    }
  }
  // Calls f(ref) for every entry (an operator rebuilding its own index after a restore).
  template <class F>
  void for_each_ref(F&& f) const {
    for (key_group g = 0; g < groups_; ++g) {
      const partition* p = partitions_[g].get();
      if (p == nullptr) continue;
      for (std::uint32_t c = 0; c < p->used; ++c) {
        if (p->at(c).live()) f(ref{g, c});
      }
    }
  }
  // Every entry's ref (for an operator's own ordering, such as key order at the end of the input).
  std::vector<ref> refs() const {
    std::vector<ref> out;
    out.reserve(size_);
    for_each_ref([&](ref r) { out.push_back(r); });
    return out;
  }

  // --- writing: each captures the entry for an ongoing snapshot before it changes ---------------
  // The key's entry, made with V{} if it had none; inserted says which.
  std::pair<ref, bool> emplace(const K& key) {
    const std::uint64_t h = traits::group_hash(key);
    const key_group g = key_group_of_hash(h, groups_);
    auto& slot = partitions_[g];
    if (slot == nullptr) slot = std::make_unique<partition>();
    partition& p = *slot;
    const std::uint32_t h32 = hash32(traits::own_hash(key, h));
    if (const std::size_t at = p.find(key, h32); at != npos) {
      const ref r{g, p.index[at].cell()};
      capture(r, p.at(r.cell));
      return {r, false};
    }
    const std::uint32_t c = p.insert(key, h32, epoch_);
    ++size_;
    return {ref{g, c}, true};
  }
  V& upsert(const K& key) { return cell_of(emplace(key).first).entry.second; }
  // The entry at r, to change.
  V& modify(ref r) {
    cell& x = cell_of(r);
    capture(r, x);
    return x.entry.second;
  }
  // The key's value to change, or nullptr if it has none.
  V* find_for_update(const K& key) {
    const std::optional<ref> r = locate(key);
    return r ? &modify(*r) : nullptr;
  }
  bool erase(const K& key) {
    const std::optional<ref> r = locate(key);
    if (!r) return false;
    erase(*r);
    return true;
  }
  void erase(ref r) {
    partition& p = *partitions_[r.group];
    cell& x = p.at(r.cell);
    capture(r, x);
    p.remove(r.cell, x.hash);
    --size_;
  }
  // Forgets everything (a restore starts from here). Abandons an ongoing snapshot.
  void clear() {
    abandon();
    for (auto& p : partitions_) p.reset();
    size_ = 0;
  }

  // --- snapshots ------------------------------------------------------------------------------
  // The synchronous part of a snapshot: see the top of the file.
  std::unique_ptr<snapshot::deferred_state> freeze() {
    abandon();
    ++epoch_;
    frozen_ = std::make_shared<frozen>();
    frozen_->table = this;
    frozen_->epoch = epoch_;
    frozen_->high_water.resize(groups_);
    for (key_group g = 0; g < groups_; ++g) {
      if (partitions_[g] != nullptr) frozen_->high_water[g] = partitions_[g]->used;
    }
    return std::make_unique<snapshot_writer>(frozen_);
  }
  // Reads a stream a snapshot wrote into the (empty) table; throws std::runtime_error naming the
  // fault when it does not decode.
  void restore(buffers::byte_reader& r) {
    try {
      for (;;) {
        const std::uint32_t g = buffers::detail::read_u32(r, "key group");
        if (g == detail::state_stream_end) return;
        if (g >= groups_) {
          throw std::runtime_error("state for key group " + std::to_string(g) + " of a stage with " +
                                   std::to_string(groups_) + " key groups");
        }
        const auto kind = buffers::codec<std::uint8_t>::decode(r);
        if (kind != detail::section_full) throw std::runtime_error("unknown section kind " + std::to_string(kind));
        const std::uint32_t entries = buffers::detail::read_u32(r, "entries");
        const std::uint64_t bytes = detail::read_u64(r);
        if (bytes > r.remaining()) throw std::runtime_error("a section longer than the state");
        const std::size_t before = r.remaining();
        for (std::uint32_t i = 0; i < entries; ++i) {
          K key = buffers::codec<K>::decode(r);
          V value = buffers::codec<V>::decode(r);
          auto [at, inserted] = emplace(key);
          if (!inserted) throw std::runtime_error("a key twice in one key group");
          cell_of(at).entry.second = std::move(value);
          runtime::pace_point();  // a large table restores in slices when on a fiber (docs/state.md)
        }
        if (before - r.remaining() != bytes) throw std::runtime_error("a section's length does not match its entries");
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("restore " + what_ + ": " + e.what());
    }
  }
  // A snapshot's deferred part is being written.
  bool snapshot_ongoing() const noexcept { return frozen_ != nullptr; }

 private:
  using traits = state_key_traits<K>;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  static constexpr std::uint32_t dead = 0xffffffffu;
  static std::uint32_t hash32(std::uint64_t h) noexcept { return static_cast<std::uint32_t>(h >> 32); }

  struct cell {
    cell() noexcept {}
    ~cell() {
      if (live()) entry.~pair();
    }
    bool live() const noexcept { return stamp != dead; }
    std::uint32_t stamp = dead;  // the epoch the entry was made in or last captured for; dead: free
    std::uint32_t hash = 0;
    union {
      std::pair<K, V> entry;
    };
  };
  struct bucket {
    std::uint32_t cell_plus_one = 0;  // 0: empty
    std::uint32_t hash = 0;
    std::uint32_t cell() const noexcept { return cell_plus_one - 1; }
  };

  struct partition {
    std::vector<std::unique_ptr<cell[]>> chunks;  // chunk k holds 8 << k cells
    std::uint32_t used = 0;                       // cells handed out so far (live or free)
    std::uint32_t live = 0;
    std::vector<std::uint32_t> free;
    std::vector<bucket> index;  // a power of two long, or empty

    cell& at(std::uint32_t c) const noexcept {
      const std::uint32_t shifted = c + 8;
      const int k = std::bit_width(shifted) - 4;
      return chunks[static_cast<std::size_t>(k)][shifted - (8u << k)];
    }
    std::size_t find(const K& key, std::uint32_t h) const {
      if (index.empty()) return npos;
      const std::size_t mask = index.size() - 1;
      for (std::size_t i = h & mask;; i = (i + 1) & mask) {
        const bucket& b = index[i];
        if (b.cell_plus_one == 0) return npos;
        if (b.hash == h && at(b.cell()).entry.first == key) return i;
      }
    }
    std::uint32_t new_cell() {
      if (!free.empty()) {
        const std::uint32_t c = free.back();
        free.pop_back();
        return c;
      }
      SLUICE_ASSERT(used < dead - 16, "a key group with 2^32 entries");
      const std::uint32_t c = used++;
      const std::uint32_t shifted = c + 8;
      const std::size_t k = static_cast<std::size_t>(std::bit_width(shifted) - 4);
      if (k == chunks.size()) chunks.push_back(std::make_unique<cell[]>(std::size_t{8} << k));
      return c;
    }
    std::uint32_t insert(const K& key, std::uint32_t h, std::uint32_t stamp) {
      if ((std::size_t{live} + 1) * 4 > index.size() * 3) grow();
      const std::uint32_t c = new_cell();
      cell& x = at(c);
      new (&x.entry) std::pair<K, V>(std::piecewise_construct, std::forward_as_tuple(key), std::forward_as_tuple());
      x.stamp = stamp;
      x.hash = h;
      place(bucket{c + 1, h});
      ++live;
      return c;
    }
    void place(bucket b) {
      const std::size_t mask = index.size() - 1;
      std::size_t i = b.hash & mask;
      while (index[i].cell_plus_one != 0) i = (i + 1) & mask;
      index[i] = b;
    }
    void grow() {
      std::vector<bucket> old = std::move(index);
      index.assign(old.empty() ? 8 : old.size() * 2, bucket{});
      for (const bucket& b : old) {
        if (b.cell_plus_one != 0) place(b);
      }
    }
    // Frees cell c (its bucket found by hash) and closes the gap in the index.
    void remove(std::uint32_t c, std::uint32_t h) {
      const std::size_t mask = index.size() - 1;
      std::size_t i = h & mask;
      while (index[i].cell_plus_one != c + 1) i = (i + 1) & mask;
      for (std::size_t j = i;;) {
        index[i] = bucket{};
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
      x.stamp = dead;
      free.push_back(c);
      --live;
    }
  };

  // The ongoing snapshot's state, shared with its deferred_state.
  struct section {
    std::vector<std::byte> bytes;
    std::uint32_t entries = 0;
  };
  struct frozen {
    state_table* table = nullptr;  // null once the table is gone
    std::uint32_t epoch = 0;
    std::vector<std::uint32_t> high_water;            // per group: cells at the freeze
    std::unordered_map<key_group, section> captured;  // groups ahead of the walk, captured before writes
    key_group group = 0;                              // the walk: the group being encoded
    bool started = false;                             //           whether its walk began
    std::uint32_t next_cell = 0;                      //           its next cell
    section current;                                  //           and what it has of it
  };

  class snapshot_writer final : public snapshot::deferred_state {
   public:
    explicit snapshot_writer(std::shared_ptr<frozen> f) : f_(std::move(f)) {}
    ~snapshot_writer() override {
      if (live()) f_->table->frozen_.reset();
    }
    bool next_slice(std::vector<std::byte>& out, std::size_t budget) override {
      if (!live()) return true;  // abandoned: a later freeze subsumed it
      const std::size_t start = out.size();
      std::size_t visits = 0;
      state_table& t = *f_->table;
      while (f_->group < t.groups_) {
        if (out.size() - start >= budget || visits >= budget / 4) return false;
        const key_group g = f_->group;
        if (!f_->started) {
          take_captured(g);
          f_->started = true;
        }
        const partition* p = t.partitions_[g].get();
        const std::uint32_t end = f_->high_water[g];
        while (p != nullptr && f_->next_cell < end && f_->current.bytes.size() < budget && visits < budget / 4) {
          cell& x = p->at(f_->next_cell++);
          ++visits;
          if (x.live() && x.stamp < f_->epoch) t.encode_into(f_->current, x);
        }
        if (p != nullptr && f_->next_cell < end) {
          if (f_->current.bytes.size() >= budget) flush(out);
          continue;
        }
        flush(out);
        ++f_->group;
        f_->next_cell = 0;
        f_->started = false;
      }
      buffers::byte_writer w(out);
      buffers::detail::write_u32(w, detail::state_stream_end);
      t.frozen_.reset();
      ended_ = true;
      return true;
    }
    bool abandoned() const noexcept override { return !ended_ && !live(); }

   private:
    bool live() const noexcept { return f_->table != nullptr && f_->table->frozen_ == f_; }
    void take_captured(key_group g) {
      auto it = f_->captured.find(g);
      if (it == f_->captured.end()) return;
      f_->current = std::move(it->second);
      f_->captured.erase(it);
    }
    // The current group's section so far goes out. Sections of one group concatenate: a restore
    // reads each as it comes, so a large group is written in several.
    void flush(std::vector<std::byte>& out) {
      section& s = f_->current;
      if (s.entries == 0) return;
      buffers::byte_writer w(out);
      buffers::detail::write_u32(w, f_->group);
      buffers::codec<std::uint8_t>::encode(w, detail::section_full);
      buffers::detail::write_u32(w, s.entries);
      detail::write_u64(w, s.bytes.size());
      w.write(s.bytes);
      s.bytes.clear();
      s.entries = 0;
    }

    std::shared_ptr<frozen> f_;
    bool ended_ = false;  // the terminator is out
  };

  cell& cell_of(ref r) const { return partitions_[r.group]->at(r.cell); }
  // Capture before write: the entry's value at the freeze goes into the ongoing snapshot first.
  void capture(ref r, cell& x) {
    if (frozen_ == nullptr || x.stamp >= frozen_->epoch) return;
    frozen& f = *frozen_;
    const bool walking = r.group == f.group && f.started;
    encode_into(walking ? f.current : f.captured[r.group], x);
  }
  void encode_into(section& s, cell& x) {
    buffers::byte_writer w(s.bytes);
    buffers::codec<K>::encode(w, x.entry.first);
    buffers::codec<V>::encode(w, x.entry.second);
    ++s.entries;
    x.stamp = frozen_->epoch;
  }
  void abandon() {
    if (frozen_ == nullptr) return;
    frozen_->table = nullptr;
    frozen_.reset();
  }

  std::string what_;
  std::size_t groups_;
  std::vector<std::unique_ptr<partition>> partitions_;  // by key group; null: no entry yet
  std::size_t size_ = 0;
  std::uint32_t epoch_ = 0;
  std::shared_ptr<frozen> frozen_;  // the ongoing snapshot
};

}  // namespace sluice::dataflow
