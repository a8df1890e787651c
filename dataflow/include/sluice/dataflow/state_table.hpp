#pragma once
// state_table<K, V>: the keyed state of one operator of one task, by key group (key_group.hpp),
// snapshotted without stalling the executor (docs/state.md).
//
// Layout. Each key group the task holds entries of has a partition (state_partition.hpp): cells
// that never move, an open-addressing index, and the keys erased since the delta base. A key's 64-bit
// hash (key_group_hash) gives both its group (the hash mod the stage's key groups) and its bucket (the
// high 32 bits). Partitions are per group so that a group's state can be written, read and (with
// rescaling) moved on its own, and an index grows by a group's share of the state at a time.
//
// Snapshots. freeze(checkpoint) is the synchronous part of a checkpoint: it starts epoch F (O(groups),
// not O(state)) and returns a deferred_state (snapshot/deferred_state.hpp) that encodes the table as
// it was at the freeze, in slices, while the task goes on. Every cell carries a stamp: the epoch it
// was created in or last captured for. A cell with a stamp below F is still owed to snapshot F. The
// slices walk each group's cells and encode those owed; every write to a cell (upsert, modify,
// erase) first encodes it if it is owed ("capture before write"), so what snapshot F holds is each
// key's value at the freeze, whatever the task did since. Cells made after the freeze carry F and
// are not in it. A freeze while a snapshot is still being written abandons that one (its
// checkpoint was subsumed); its deferred_state then ends at once with nothing more.
//
// Incremental snapshots. A snapshot is a delta when the table has a base: the newest checkpoint
// that froze it and is known complete (confirm(), from the task when the checkpoint completes, or
// the checkpoint a restore read). A delta on base B (frozen at epoch E_B) owes only the cells
// written at E_B or later (each cell keeps the epoch of its last write) and lists the keys erased
// since (tombstones, kept per partition until no delta that may still be written needs them); a
// restore of it applies it on the base's state, so recovery reads the chain oldest first. A chain
// is at most max_chain_deltas long, then the next snapshot is whole again; so is the one after a
// table erased more than twice its size since its base (tombstones would outgrow the state).
//
// The encoded stream (what the slices append, in key group order):
//   header  section*  terminator
//   header     := u32 0xfffffffd, u64 checkpoint                       (the whole state)
//               | u32 0xfffffffe, u64 checkpoint, u64 base checkpoint  (what changed since the base)
//   section    := group u32, kind u8, entries u32, bytes u64, then
//                   kind 0: entry*  (codec<K> key, codec<V> value; any order)
//                   kind 1: codec<K> key*  (keys erased since the base; before the group's entries)
//                   kind 2: (entry, u64 last write time)*  (a table with a state TTL)
//   terminator := u32 0xffffffff
// All integers little-endian. A stream without a header (written before incremental snapshots) is
// a whole state. restore() reads either.
//
// State TTL (state_ttl.hpp). A table given a ttl keeps each entry's write time (the latest table
// time it was written at; its operator sets the time: a record's event time, the watermark, or the
// processing time) and treats an entry whose time plus the ttl is reached as gone: locate(), find() and contains() do not see it, and
// emplace() makes it anew (V{}). The entries stay until sweep() visits them (an operator calls it a
// few cells per record, so a table never holds much more than what was written within a ttl) or an
// operator drops them. Snapshots carry the times (kind 2), so an entry expired before a checkpoint
// is expired after its restore too; a stream without times restored into a table with a ttl takes
// the table's time then (the TTL was just turned on), and a table without one ignores them.
//
// Every call runs on the task's executor (the table is the operator's, and the operator is the
// task's). Nothing here locks.

#include <sluice/buffers/codec.hpp>
#include <sluice/dataflow/key_group.hpp>
#include <sluice/dataflow/state_partition.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/plant.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/deferred_state.hpp>

#include <algorithm>
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
inline constexpr std::uint32_t state_stream_whole = 0xfffffffdu;
inline constexpr std::uint32_t state_stream_delta = 0xfffffffeu;
inline constexpr std::uint8_t section_full = 0;
inline constexpr std::uint8_t section_erased = 1;
inline constexpr std::uint8_t section_timed = 2;
// The longest chain of deltas a table writes before a whole snapshot again (recovery reads them all).
inline constexpr std::uint32_t max_chain_deltas = 8;
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
  // The key's live entry (not expired: see State TTL above).
  std::optional<ref> locate(const K& key) const {
    const std::optional<ref> r = locate_any(key);
    if (r && expired(*r)) return std::nullopt;
    return r;
  }
  // The key's entry, expired or not.
  std::optional<ref> locate_any(const K& key) const {
    const std::uint64_t h = traits::group_hash(key);
    const key_group g = key_group_of_hash(h, groups_);
    const partition* p = partitions_[g].get();
    if (p == nullptr) return std::nullopt;
    const std::size_t at = p->find(key, hash32(traits::own_hash(key, h)));
    if (at == detail::no_bucket) return std::nullopt;
    return ref{g, p->index[at].cell()};
  }
  const V* find(const K& key) const {
    const std::optional<ref> r = locate(key);
    return r ? &value(*r) : nullptr;
  }
  bool contains(const K& key) const { return locate(key).has_value(); }
  const K& key(ref r) const { return cell_of(r).entry.first; }
  const V& value(ref r) const { return cell_of(r).entry.second; }

  // Calls f(key, value) for every entry, expired ones too (group by group, cells in slab order).
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
    for (key_group g = 0; g < groups_; ++g) for_each_ref_in(g, f);
  }
  // Calls f(ref) for every entry of key group g.
  template <class F>
  void for_each_ref_in(key_group g, F&& f) const {
    const partition* p = partitions_[g].get();
    if (p == nullptr) return;
    for (std::uint32_t c = 0; c < p->used; ++c) {
      if (p->at(c).live()) f(ref{g, c});
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
  // The key's entry, made with V{} if it had none (or only an expired one); inserted says which.
  // (Counted as a write.)
  std::pair<ref, bool> emplace(const K& key) {
    const std::uint64_t h = traits::group_hash(key);
    const key_group g = key_group_of_hash(h, groups_);
    auto& slot = partitions_[g];
    if (slot == nullptr) slot = std::make_unique<partition>();
    partition& p = *slot;
    const std::uint32_t h32 = hash32(traits::own_hash(key, h));
    if (const std::size_t at = p.find(key, h32); at != detail::no_bucket) {
      const ref r{g, p.index[at].cell()};
      cell& x = p.at(r.cell);
      const bool gone = expired(r);
      written(r, x);
      if (gone) x.entry.second = V{};
      return {r, gone};
    }
    const std::uint32_t c = p.insert(key, h32, epoch_);
    ++size_;
    touch(p, c, std::max(now_, write_time_));
    return {ref{g, c}, true};
  }
  V& upsert(const K& key) { return cell_of(emplace(key).first).entry.second; }
  // The entry at r, to change.
  V& modify(ref r) {
    cell& x = cell_of(r);
    written(r, x);
    return x.entry.second;
  }
  // The key's value to change, or nullptr if it has none.
  V* find_for_update(const K& key) {
    const std::optional<ref> r = locate(key);
    return r ? &modify(*r) : nullptr;
  }
  // Erases the key's entry, expired or not.
  bool erase(const K& key) {
    const std::uint64_t h = traits::group_hash(key);
    const key_group g = key_group_of_hash(h, groups_);
    const partition* p = partitions_[g].get();
    if (p == nullptr) return false;
    const std::uint32_t h32 = hash32(traits::own_hash(key, h));
    const std::size_t at = p->find(key, h32);
    if (at == detail::no_bucket) return false;
    erase(ref{g, p->index[at].cell()}, h32);
    return true;
  }
  void erase(ref r) {
    const K& key = cell_of(r).entry.first;
    erase(r, hash32(traits::own_hash(key, traits::group_hash(key))));
  }
  // Forgets everything (a restore starts from here), the delta base too. Abandons an ongoing
  // snapshot.
  void clear() {
    abandon();
    for (auto& p : partitions_) p.reset();
    size_ = 0;
    base_.reset();
    pending_.clear();
    restored_ = {};
    sweep_ = {};
  }

  // --- state TTL (see the top of the file) ------------------------------------------------------
  // Entries expire `ttl` after their last write (0: never). Set it before the first entry.
  void set_ttl(std::uint64_t ttl) noexcept { ttl_ = ttl; }
  std::uint64_t ttl() const noexcept { return ttl_; }
  // The table's time: what writes record, and what expiry is measured against. advance_time()
  // only moves it forward; set_time() sets it (a restore: the restored operator's time). Time 0 is
  // "none yet" (no watermark): an entry written then counts from the first time the table gets.
  void advance_time(std::uint64_t now) noexcept {
    now_ = std::max(now_, now);
    if (origin_ == 0) origin_ = now_;
  }
  void set_time(std::uint64_t now) noexcept {
    now_ = now;
    if (origin_ == 0) origin_ = now_;
  }
  std::uint64_t time() const noexcept { return now_; }
  // Writes until the next call record `t` if it is later than the table's time (an event-time TTL:
  // the writing record's own time); 0: the table's time.
  void write_time(std::uint64_t t) noexcept { write_time_ = t; }
  bool expired(ref r) const noexcept {
    if (ttl_ == 0 || now_ < ttl_) return false;  // written at or after time 0: none can be
    return written_at(r) <= now_ - ttl_;
  }
  // When the entry at r was last written, as its expiry counts it (a table with a TTL).
  std::uint64_t written_at(ref r) const noexcept {
    const partition& p = *partitions_[r.group];
    const std::uint64_t t = r.cell < p.touched.size() ? p.touched[r.cell] : now_;
    return t == 0 ? origin_ : t;
  }
  // Visits up to `visits` cells from where the last sweep stopped (round and round the table) and
  // calls expire(ref) for each expired entry; expire erases it, or changes it (a write: it is live
  // again). Returns the entries it called expire for.
  template <class F>
  std::size_t sweep(std::size_t visits, F&& expire) {
    if (ttl_ == 0 || size_ == 0) return 0;
    std::size_t found = 0;
    for (std::size_t i = 0; i < visits; ++i) {
      if (sweep_.group >= groups_) sweep_ = {};
      const partition* p = partitions_[sweep_.group].get();
      if (p == nullptr || sweep_.cell >= p->used) {
        ++sweep_.group;
        sweep_.cell = 0;
        continue;
      }
      const ref r{static_cast<key_group>(sweep_.group), sweep_.cell++};
      if (p->at(r.cell).live() && expired(r)) {
        expire(r);
        ++found;
      }
    }
    return found;
  }

  // --- snapshots ------------------------------------------------------------------------------
  // Whether snapshots may be deltas (on by default; off: every snapshot is whole).
  void set_incremental(bool on) noexcept { incremental_ = on; }
  // The synchronous part of a snapshot for `checkpoint`: see the top of the file.
  std::unique_ptr<snapshot::deferred_state> freeze(snapshot::checkpoint_id checkpoint = snapshot::no_checkpoint) {
    abandon();
    ++epoch_;
    frozen_ = std::make_shared<frozen>();
    frozen& f = *frozen_;
    f.table = this;
    f.epoch = epoch_;
    f.checkpoint = checkpoint;
    f.timed = ttl_ != 0;
    f.high_water.resize(groups_);
    std::size_t erased = 0;
    for (key_group g = 0; g < groups_; ++g) {
      if (partitions_[g] == nullptr) continue;
      f.high_water[g] = partitions_[g]->used;
      erased += partitions_[g]->erased.size();
    }
    if (erased > 2 * size_ + 4096) {
      base_.reset();  // a whole snapshot is smaller than the deltas would be
      pending_.clear();
    }
    if (incremental_ && checkpoint != snapshot::no_checkpoint && base_ && base_->depth < detail::max_chain_deltas) {
      f.base = *base_;
    }
    // Tombstones older than every base a later delta may have are of no more use.
    std::uint32_t oldest = epoch_;
    if (base_) oldest = std::min(oldest, base_->epoch);
    for (const link& l : pending_) oldest = std::min(oldest, l.epoch);
    for (auto& p : partitions_) {
      if (p != nullptr) p->forget_erased_before(oldest);
    }
    if (checkpoint != snapshot::no_checkpoint) {
      if (pending_.size() == max_pending) pending_.erase(pending_.begin());
      pending_.push_back(link{checkpoint, epoch_, f.base ? f.base->depth + 1 : 0});
    }
    return std::make_unique<snapshot_writer>(frozen_);
  }
  // The checkpoint is complete: if this table froze for it, it is the base of the next delta.
  void confirm(snapshot::checkpoint_id checkpoint) {
    for (const link& l : pending_) {
      if (l.checkpoint == checkpoint && (!base_ || base_->checkpoint < checkpoint)) base_ = l;
    }
    std::erase_if(pending_, [&](const link& l) { return l.checkpoint <= checkpoint; });
  }
  // The checkpoint the next delta would be on (none without a base).
  snapshot::checkpoint_id delta_base() const noexcept { return base_ ? base_->checkpoint : snapshot::no_checkpoint; }

  // Reads a stream a snapshot wrote: a whole state replaces the table's, a delta applies on the
  // state of its base (which must be what the table holds: the previous link of the chain). Throws
  // std::runtime_error naming the fault when it does not decode or does not follow.
  void restore(buffers::byte_reader& r) {
    try {
      restore_stream(r);
    } catch (const std::exception& e) {
      throw std::runtime_error("restore " + what_ + ": " + e.what());
    }
  }
  // A snapshot's deferred part is being written.
  bool snapshot_ongoing() const noexcept { return frozen_ != nullptr; }
  // Tombstones held for deltas (memory beside the entries).
  std::size_t erased_keys() const noexcept {
    std::size_t n = 0;
    for (const auto& p : partitions_) n += p == nullptr ? 0 : p->erased.size();
    return n;
  }

 private:
  using traits = state_key_traits<K>;
  static std::uint32_t hash32(std::uint64_t h) noexcept { return static_cast<std::uint32_t>(h >> 32); }
  static constexpr std::size_t max_pending = 16;

  using partition = detail::state_partition<K, V>;
  using cell = typename partition::cell;

  // A snapshot the table froze: for its checkpoint, at its epoch, so many deltas from a whole one.
  struct link {
    snapshot::checkpoint_id checkpoint = snapshot::no_checkpoint;
    std::uint32_t epoch = 0;
    std::uint32_t depth = 0;
  };

  // The ongoing snapshot's state, shared with its deferred_state.
  struct section {
    std::vector<std::byte> bytes;
    std::uint32_t entries = 0;
  };
  struct frozen {
    state_table* table = nullptr;  // null once the table is gone
    std::uint32_t epoch = 0;
    snapshot::checkpoint_id checkpoint = snapshot::no_checkpoint;
    bool timed = false;                               // entries carry their write times (a TTL)
    std::optional<link> base;                         // a delta on it; none: the whole state
    std::vector<std::uint32_t> high_water;            // per group: cells at the freeze
    std::unordered_map<key_group, section> captured;  // groups ahead of the walk, captured before writes
    bool header_out = false;
    key_group group = 0;                              // the walk: the group being encoded
    bool started = false;                             //           whether its walk began
    std::uint32_t next_cell = 0;                      //           its next cell
    section current;                                  //           and what it has of it
    // Whether cell x is owed to this snapshot: not yet encoded, and (for a delta) written since the
    // base and before the freeze (a write after the freeze to a cell the delta does not owe makes
    // it no more owed: its value at the freeze is the base's).
    bool owes(const cell& x) const noexcept {
      return x.live() && x.stamp < epoch && (!base || (x.changed >= base->epoch && x.changed < epoch));
    }
  };

  class snapshot_writer final : public snapshot::deferred_state {
   public:
    explicit snapshot_writer(std::shared_ptr<frozen> f) : f_(std::move(f)) {}
    ~snapshot_writer() override {
      if (live()) f_->table->frozen_.reset();
    }
    bool next_slice(std::vector<std::byte>& out, std::size_t budget) override {
      if (!live()) return true;  // abandoned: a later freeze subsumed it
      if (!f_->header_out) write_header(out);
      const std::size_t start = out.size();
      std::size_t visits = 0;
      state_table& t = *f_->table;
      while (f_->group < t.groups_) {
        if (out.size() - start >= budget || visits >= budget / 4) return false;
        const key_group g = f_->group;
        if (!f_->started) {
          write_erased(g, out);
          take_captured(g);
          f_->started = true;
        }
        const partition* p = t.partitions_[g].get();
        const std::uint32_t end = f_->high_water[g];
        while (p != nullptr && f_->next_cell < end && f_->current.bytes.size() < budget && visits < budget / 4) {
          const ref at{g, f_->next_cell++};
          cell& x = p->at(at.cell);
          ++visits;
          if (f_->owes(x)) t.encode_into(f_->current, at, x);
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
    snapshot::checkpoint_id delta_base() const noexcept override {
      return f_->base ? f_->base->checkpoint : snapshot::no_checkpoint;
    }

   private:
    void write_header(std::vector<std::byte>& out) {
      buffers::byte_writer w(out);
      buffers::detail::write_u32(w, f_->base ? detail::state_stream_delta : detail::state_stream_whole);
      detail::write_u64(w, f_->checkpoint);
      if (f_->base) detail::write_u64(w, f_->base->checkpoint);
      f_->header_out = true;
    }
    // A delta's first section of a group: the keys erased since its base, before the frozen epoch.
    void write_erased(key_group g, std::vector<std::byte>& out) {
      const partition* p = f_->table->partitions_[g].get();
      if (!f_->base || p == nullptr) return;
      section s;
      buffers::byte_writer keys(s.bytes);
      for (const auto& e : p->erased) {
        if (e.epoch < f_->base->epoch || e.epoch >= f_->epoch) continue;
        buffers::codec<K>::encode(keys, e.key);
        ++s.entries;
      }
      if (s.entries == 0) return;
      buffers::byte_writer w(out);
      buffers::detail::write_u32(w, g);
      buffers::codec<std::uint8_t>::encode(w, detail::section_erased);
      buffers::detail::write_u32(w, s.entries);
      detail::write_u64(w, s.bytes.size());
      w.write(s.bytes);
    }
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
      buffers::codec<std::uint8_t>::encode(w, f_->timed ? detail::section_timed : detail::section_full);
      buffers::detail::write_u32(w, s.entries);
      detail::write_u64(w, s.bytes.size());
      w.write(s.bytes);
      s.bytes.clear();
      s.entries = 0;
    }

    std::shared_ptr<frozen> f_;
    bool ended_ = false;  // the terminator is out
  };

  void restore_stream(buffers::byte_reader& r) {
    std::uint32_t group = buffers::detail::read_u32(r, "key group");
    bool delta = false;
    snapshot::checkpoint_id checkpoint = snapshot::no_checkpoint;
    if (group == detail::state_stream_whole || group == detail::state_stream_delta) {
      delta = group == detail::state_stream_delta;
      checkpoint = detail::read_u64(r);
      if (delta) {
        const snapshot::checkpoint_id base = detail::read_u64(r);
        if (!restored_.any || restored_.checkpoint != base || base == snapshot::no_checkpoint || checkpoint <= base) {
          throw std::runtime_error("the state of checkpoint " + std::to_string(checkpoint) + " is a delta on checkpoint " +
                                   std::to_string(base) + ", but " + restored_what() +
                                   " (a lost or misordered delta)");
        }
      }
      group = buffers::detail::read_u32(r, "key group");
    }
    const std::uint32_t depth = delta ? restored_.depth + 1 : 0;
    if (!delta) clear();
    for (; group != detail::state_stream_end; group = buffers::detail::read_u32(r, "key group")) {
      restore_section(group, r, delta);
    }
    // What was restored is the state of `checkpoint`, complete: the next delta's base.
    for (auto& p : partitions_) {
      if (p != nullptr) p->erased.clear();
    }
    ++epoch_;
    pending_.clear();
    base_.reset();
    if (checkpoint != snapshot::no_checkpoint) base_ = link{checkpoint, epoch_, depth};
    restored_ = {checkpoint, depth, true};
  }
  std::string restored_what() const {
    if (!restored_.any) return "no state was restored before it";
    if (restored_.checkpoint == snapshot::no_checkpoint) return "the state before it names no checkpoint";
    return "the state before it is checkpoint " + std::to_string(restored_.checkpoint) + "'s";
  }
  void restore_section(std::uint32_t g, buffers::byte_reader& r, bool delta) {
    if (g >= groups_) {
      throw std::runtime_error("state for key group " + std::to_string(g) + " of a stage with " + std::to_string(groups_) +
                               " key groups");
    }
    const auto kind = buffers::codec<std::uint8_t>::decode(r);
    if (kind != detail::section_full && kind != detail::section_timed && !(delta && kind == detail::section_erased)) {
      throw std::runtime_error("unknown section kind " + std::to_string(kind));
    }
    const std::uint32_t entries = buffers::detail::read_u32(r, "entries");
    const std::uint64_t bytes = detail::read_u64(r);
    if (bytes > r.remaining()) throw std::runtime_error("a section longer than the state");
    const std::size_t before = r.remaining();
    for (std::uint32_t i = 0; i < entries; ++i) {
      K key = buffers::codec<K>::decode(r);
      if (kind == detail::section_erased) {
        erase(key);
      } else {
        V value = buffers::codec<V>::decode(r);
        const std::uint64_t time = kind == detail::section_timed ? detail::read_u64(r) : now_;
        auto [at, inserted] = emplace(key);
        if (!inserted && !delta) throw std::runtime_error("a key twice in one key group");
        cell_of(at).entry.second = std::move(value);
        touch(*partitions_[at.group], at.cell, time);
      }
      runtime::pace_point();  // a large table restores in slices when on a fiber (docs/state.md)
    }
    if (before - r.remaining() != bytes) throw std::runtime_error("a section's length does not match its entries");
  }

  cell& cell_of(ref r) const { return partitions_[r.group]->at(r.cell); }
  // A write to x: captured first, then marked changed (for the next delta).
  void written(ref r, cell& x) {
    capture(r, x);
    // Planted: a changed value is not marked, so the next delta leaves it out (a lost delta).
    if (!SLUICE_PLANTED("delta-loses-write")) x.changed = epoch_;
    if (ttl_ != 0) {
      partition& p = *partitions_[r.group];
      touch(p, r.cell, std::max({r.cell < p.touched.size() ? p.touched[r.cell] : 0, now_, write_time_}));
    }
  }
  // Records cell c's write time (a table with a TTL). A write keeps the latest time written (an
  // event-time write by an older record does not shorten the entry's life).
  void touch(partition& p, std::uint32_t c, std::uint64_t at) {
    if (ttl_ == 0) return;
    if (p.touched.size() < p.used) p.touched.resize(std::max<std::size_t>(p.used, p.touched.size() * 2));
    p.touched[c] = at;
  }
  // Capture before write: the entry's value at the freeze goes into the ongoing snapshot first.
  void capture(ref r, cell& x) {
    if (frozen_ == nullptr || !frozen_->owes(x)) return;
    frozen& f = *frozen_;
    const bool walking = r.group == f.group && f.started;
    encode_into(walking ? f.current : f.captured[r.group], r, x);
  }
  void encode_into(section& s, ref r, cell& x) {
    buffers::byte_writer w(s.bytes);
    buffers::codec<K>::encode(w, x.entry.first);
    buffers::codec<V>::encode(w, x.entry.second);
    if (frozen_->timed) detail::write_u64(w, written_at(r));
    ++s.entries;
    x.stamp = frozen_->epoch;
  }
  // Erases the entry at r, whose key's bucket hash is h32.
  void erase(ref r, std::uint32_t h32) {
    partition& p = *partitions_[r.group];
    cell& x = p.at(r.cell);
    capture(r, x);
    // A later delta says so: one on the base, or on a snapshot frozen and not yet confirmed. With
    // neither (no checkpoint yet, or none taken at all), no delta can need it: nothing is kept, so a
    // job without checkpoints that erases all along (windows firing) does not pile tombstones up.
    if (incremental_ && (base_ || !pending_.empty())) p.erased.push_back({epoch_, x.entry.first});
    p.remove(r.cell, h32);
    --size_;
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
  std::uint32_t epoch_ = 1;         // writes now carry it; a freeze starts the next
  std::shared_ptr<frozen> frozen_;  // the ongoing snapshot
  bool incremental_ = true;
  std::uint64_t ttl_ = 0;           // state TTL: 0, none
  std::uint64_t now_ = 0;           // the table's time (a TTL's)
  std::uint64_t origin_ = 0;        // the first time it had other than 0
  std::uint64_t write_time_ = 0;    // what writes record if later than now_
  struct {
    std::size_t group = 0;
    std::uint32_t cell = 0;
  } sweep_;                         // where the next sweep() starts
  std::optional<link> base_;        // the newest complete snapshot: the next delta's base
  std::vector<link> pending_;       // snapshots frozen, not yet known complete (oldest first)
  struct {
    snapshot::checkpoint_id checkpoint = snapshot::no_checkpoint;  // the last link a restore read
    std::uint32_t depth = 0;
    bool any = false;
  } restored_;
};

}  // namespace sluice::dataflow
