#pragma once
// Event-time windows: keyed, stateful operators that sit after a key_by exchange and emit when the
// watermark passes (keyed_stream::window, sliding_window and top_n in job.hpp build them). State is
// kept in state tables by key group (state_table.hpp: one entry per key and window or time, frozen
// at a checkpoint and written in slices after), with an index by window or time beside it, rebuilt
// on a restore; results are emitted in key order, so a run's output is deterministic.
// operators.hpp includes this header, so including either gives both.
//
// Window aggregates. A window aggregate of `size` and `slide` (1 <= slide <= size) has the windows
// [s, s + size) for every s that is a multiple of `slide` (aligned to time 0, as Flink's HOP; no
// window starts below 0). A record at time t folds, under its key, into every window that holds t:
// size / slide windows when slide divides size (ceil or floor of it otherwise), fewer for t below
// size - slide, whose earlier windows would start below 0. Tumbling windows are slide == size. A
// window fires, emit(s, key, acc) for each of its keys in key order and windows oldest first, once
// the watermark reaches its last instant s + size - 1, or at the end of the input.
//
// Allowed lateness L (window_options): a window that fired keeps its state until the watermark
// reaches s + size - 1 + L. A record for it that comes meanwhile (behind the watermark, by no more
// than L) folds into it and fires its key again at once: emit(s, key, acc) with the updated
// accumulator, a "late firing" as Flink's event-time trigger makes with allowed lateness (the same
// for a window the watermark passed while it had no state). A record none of whose windows is
// still kept is late: dropped and counted (late_records()). With L = 0, the default, a window is
// dropped as it fires, and a record for a window the watermark has reached is late.
//
// Per-window top-N (top_n_op). Records are keyed by their window (normally the window start an
// upstream window emitted) and carry its time (time(record): for a window's result, its last
// instant). The operator holds each key's records until the watermark reaches their time (or the
// input ends), then emits, oldest time first and keys in key order, the records whose rank(record)
// (a totally ordered value: no NaN) is among the n highest, ties at the n-th place included (n = 1
// is "every record of the greatest rank"): emit(key, place, record), by rank descending, where
// place is 1 + the number of records ranked higher (ties share it, as SQL's RANK()). Records of
// equal rank come in ascending record order (operator< when T has one, else the bytes of its codec
// encoding), so the output does not depend on the order records arrived in from several channels.
// Records of one key with different times are ranked apart, per time. It holds only the records
// that can still be in the top n (those ranked at least as high as the n-th so far: more than n
// only when they tie). A record behind the watermark is late: dropped and counted. There is no
// allowed lateness: an upstream window's late firing is a second result for the same key, which a
// ranking could only take by retracting the first.

#include <sluice/buffers/codec.hpp>
#include <sluice/dataflow/collector.hpp>
#include <sluice/dataflow/operators.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::dataflow {

// What window(), sliding_window() and the window aggregates take besides size and slide.
struct window_options {
  // Event time a fired window keeps its state for records that come late (see the top).
  std::uint64_t allowed_lateness = 0;
};

namespace detail {
inline constexpr std::uint64_t max_time = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > max_time - b ? max_time : a + b;
}
// Refuses a window shape other than 1 <= slide <= size; `kind` names the window in the message.
inline void check_window(const std::string& kind, std::uint64_t size, std::uint64_t slide) {
  if (size == 0) throw std::invalid_argument(kind + " window: size must be at least 1");
  if (slide == 0 || slide > size) {
    throw std::invalid_argument(kind + " window: slide " + std::to_string(slide) + " must be at least 1 and at most "
                                "the size " + std::to_string(size));
  }
}
// The identity entries of a window stage (job.hpp). A tumbling window names its lateness only when
// it has one, so a job's fingerprint is the one it had before lateness existed.
inline std::vector<std::string> window_identity(std::uint64_t size, std::uint64_t slide, const window_options& o,
                                                bool tumbling) {
  std::vector<std::string> out{"op=window"};
  out.push_back(tumbling ? "window.kind=tumbling" : "window.kind=sliding");
  out.push_back("window.size=" + std::to_string(size));
  if (!tumbling) out.push_back("window.slide=" + std::to_string(slide));
  if (!tumbling || o.allowed_lateness != 0) out.push_back("window.lateness=" + std::to_string(o.allowed_lateness));
  return out;
}
// The watermark as state: (seen, value).
inline std::pair<bool, std::uint64_t> watermark_state(const std::optional<std::uint64_t>& w) {
  return {w.has_value(), w.value_or(0)};
}
inline std::optional<std::uint64_t> watermark_of(const std::pair<bool, std::uint64_t>& s) {
  return s.first ? std::optional<std::uint64_t>(s.second) : std::nullopt;
}
// The scalar state of the window operators and top-n: (watermark state, late records).
using watermark_head = std::tuple<std::pair<bool, std::uint64_t>, std::uint64_t>;
}  // namespace detail

// Sliding (and, with slide == size, tumbling) event-time windows per key: see the top of the file.
// Built as tumbling_window_aggregate or sliding_window_aggregate, which name it in errors.
template <class K, class In, class Acc, class Out>
class window_aggregate : public collector<In>, public stateful, public chain_part {
 public:
  struct functions {
    std::function<std::uint64_t(const In&)> time;
    std::function<K(const In&)> key;
    std::function<void(Acc&, const In&)> fold;
    std::function<Out(std::uint64_t, const K&, const Acc&)> emit;
  };

  void collect(const In& record) override {
    const std::uint64_t t = fns_.time(record);
    const K key = fns_.key(record);
    bool kept = false;
    // The windows holding t, oldest first: starts from the first multiple of slide above t - size
    // (0 for t < size) to t's own, t - t % slide (no overflow: that start is at most t).
    const std::uint64_t newest = t - t % slide_;
    std::uint64_t start = 0;
    if (t >= size_) {
      const std::uint64_t low = t - size_ + 1;
      start = low + (slide_ - low % slide_) % slide_;
    }
    for (;; start += slide_) {
      const std::uint64_t last = last_of(start);
      if (!watermark_ || detail::saturating_add(last, lateness_) > *watermark_) {
        Acc& acc = window_state(start, key);
        fns_.fold(acc, record);
        kept = true;
        if (watermark_ && last <= *watermark_) out_->collect(fns_.emit(start, key, acc));  // a late firing
      }
      if (start == newest) break;
    }
    if (!kept) ++late_records_;
  }
  void watermark(std::uint64_t t) override {
    const std::optional<std::uint64_t> before = watermark_;
    if (!watermark_ || t > *watermark_) watermark_ = t;
    advance(before);
    out_->watermark(t);
  }
  // Every window fires (those not fired yet) and is dropped; a record after this would be late.
  void end_of_data() override {
    const std::optional<std::uint64_t> before = watermark_;
    watermark_ = detail::max_time;
    advance(before);
    out_->end_of_data();
  }

  // Version 3: (watermark, late records), then the table of (key, window start) -> accumulator
  // (state_table.hpp). A window has fired when its last instant is at or before the watermark, so
  // the fired-but-kept windows are those, and a restore fires nothing twice. Versions 1 (a tumbling
  // window's state before lateness: fired_through + 1 or 0, late records, windows) and 2 (the
  // watermark, late records, windows oldest first with their keys in order) still restore.
  std::vector<std::byte> snapshot_state() const override {
    return detail::encode_head(3, std::make_tuple(detail::watermark_state(watermark_), late_records_));
  }
  std::unique_ptr<snapshot::deferred_state> snapshot_rest(snapshot::checkpoint_id id) override {
    return table_.freeze(id);
  }
  void checkpoint_completed(snapshot::checkpoint_id id) override { table_.confirm(id); }
  void restore_state(std::span<const std::byte> bytes) override {
    const std::string what = kind_ + " window";
    index_.clear();
    if (detail::is_version(bytes, 3)) {
      auto [watermark, late] = detail::restore_with_table<detail::watermark_head>(bytes, what, table_);
      watermark_ = detail::watermark_of(watermark);
      late_records_ = late;
      detail::index_by_space(table_, index_);
      return;
    }
    table_.clear();
    windows_t windows;
    if (!bytes.empty() && bytes[0] == std::byte{1}) {
      // Windows starting before fired_through had fired: as a watermark just below it would have it.
      using state_t = std::tuple<std::uint64_t, std::uint64_t, windows_t>;
      auto [fired, late, w] = detail::decode_state<state_t>(bytes, what.c_str());
      watermark_ = fired < 2 ? std::nullopt : std::optional<std::uint64_t>(fired - 2);
      late_records_ = late;
      windows = std::move(w);
    } else if (!bytes.empty() && bytes[0] == std::byte{2}) {
      using state_t = std::tuple<std::pair<bool, std::uint64_t>, std::uint64_t, windows_t>;
      try {
        auto [watermark, late, w] = buffers::decode_from<state_t>(bytes.subspan(1));
        watermark_ = detail::watermark_of(watermark);
        late_records_ = late;
        windows = std::move(w);
      } catch (const std::exception& e) {
        throw std::runtime_error("restore " + what + ": " + e.what());
      }
    } else {
      throw std::runtime_error("restore " + what + ": unknown state version");
    }
    for (auto& [start, keys] : windows) {
      for (auto& [key, acc] : keys) window_state(start, key) = std::move(acc);
    }
  }

  std::uint64_t late_records() const noexcept { return late_records_; }
  // Windows with state: open ones and fired ones kept for late records.
  std::size_t open_windows() const noexcept { return index_.size(); }

 protected:
  window_aggregate(std::string kind, std::uint64_t size, std::uint64_t slide, functions fns, collector<Out>& out,
                   window_options options, std::size_t key_groups)
      : kind_(std::move(kind)), size_(size), slide_(slide), lateness_(options.allowed_lateness), fns_(std::move(fns)),
        out_(&out), table_(kind_ + " window", key_groups) {
    detail::check_window(kind_, size, slide);
  }

 private:
  using windows_t = std::vector<std::pair<std::uint64_t, std::vector<std::pair<K, Acc>>>>;
  using table_t = state_table<namespaced<K>, Acc>;
  using ref = typename table_t::ref;

  // The key's accumulator in the window at `start`, to change (made, and indexed, on first use).
  Acc& window_state(std::uint64_t start, const K& key) {
    auto [at, inserted] = table_.emplace(namespaced<K>{key, start});
    if (inserted) index_[start].push_back(at);
    return table_.modify(at);
  }

  std::uint64_t last_of(std::uint64_t start) const noexcept { return detail::saturating_add(start, size_ - 1); }
  // The watermark moved on from `before`: windows it reached fire, oldest first, unless they had
  // already (their last instant at or before `before`); windows past their lateness are dropped.
  void advance(std::optional<std::uint64_t> before) {
    const std::uint64_t now = *watermark_;
    for (auto it = index_.begin(); it != index_.end();) {
      const std::uint64_t last = last_of(it->first);
      if (last > now) break;
      std::vector<ref>& keys = it->second;
      if (!before || last > *before) {
        detail::sort_by_key(table_, keys);
        for (const ref& at : keys) {
          out_->collect(fns_.emit(it->first, table_.key(at).key, table_.value(at)));
          runtime::pace_point();
        }
      }
      if (detail::saturating_add(last, lateness_) <= now) {
        for (const ref& at : keys) {
          table_.erase(at);
          runtime::pace_point();
        }
        it = index_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::string kind_;
  std::uint64_t size_;
  std::uint64_t slide_;
  std::uint64_t lateness_;
  functions fns_;
  collector<Out>* out_;
  table_t table_;                                     // (key, window start) -> accumulator
  std::map<std::uint64_t, std::vector<ref>> index_;  // window start -> its entries, rebuilt on restore
  std::optional<std::uint64_t> watermark_;  // the greatest seen; the largest time after the end
  std::uint64_t late_records_ = 0;
};

// Tumbling event-time windows of `size` time units per key: the windows [start, start + size).
template <class K, class In, class Acc, class Out>
class tumbling_window_aggregate final : public window_aggregate<K, In, Acc, Out> {
 public:
  using functions = typename window_aggregate<K, In, Acc, Out>::functions;
  tumbling_window_aggregate(std::uint64_t size, functions fns, collector<Out>& out, window_options options = {},
                            std::size_t key_groups = default_key_groups)
      : window_aggregate<K, In, Acc, Out>("tumbling", size, size, std::move(fns), out, options, key_groups) {}
};

// Sliding event-time windows of `size` every `slide` time units per key (1 <= slide <= size).
template <class K, class In, class Acc, class Out>
class sliding_window_aggregate final : public window_aggregate<K, In, Acc, Out> {
 public:
  using functions = typename window_aggregate<K, In, Acc, Out>::functions;
  sliding_window_aggregate(std::uint64_t size, std::uint64_t slide, functions fns, collector<Out>& out,
                           window_options options = {}, std::size_t key_groups = default_key_groups)
      : window_aggregate<K, In, Acc, Out>("sliding", size, slide, std::move(fns), out, options, key_groups) {}
};

// The n highest-ranked records per key and time, ties included: see the top of the file.
template <class K, class T, std::totally_ordered Rank, class Out>
class top_n_op final : public collector<T>, public stateful, public chain_part {
 public:
  struct functions {
    std::function<K(const T&)> key;
    std::function<std::uint64_t(const T&)> time;
    std::function<Rank(const T&)> rank;
    std::function<Out(const K&, std::size_t, const T&)> emit;
  };
  top_n_op(std::size_t n, functions fns, collector<Out>& out, std::size_t key_groups = default_key_groups)
      : n_(n), fns_(std::move(fns)), out_(&out), table_("top_n", key_groups) {
    if (n == 0) throw std::invalid_argument("top_n: n must be at least 1");
  }

  void collect(const T& record) override {
    const std::uint64_t t = fns_.time(record);
    if (watermark_ && t <= *watermark_) {
      ++late_records_;
      return;
    }
    hold(group(fns_.key(record), t), record);
  }
  void watermark(std::uint64_t t) override {
    if (!watermark_ || t > *watermark_) watermark_ = t;
    fire(*watermark_);
    out_->watermark(t);
  }
  void end_of_data() override {
    watermark_ = detail::max_time;
    fire(detail::max_time);
    out_->end_of_data();
  }

  // Version 2: (watermark, late records), then the table of (key, time) -> held records in output
  // order (state_table.hpp). Version 1, (watermark, late records, groups by time then key with their
  // held records), still restores. A restore takes the ranks from rank(record) again.
  std::vector<std::byte> snapshot_state() const override {
    return detail::encode_head(2, std::make_tuple(detail::watermark_state(watermark_), late_records_));
  }
  std::unique_ptr<snapshot::deferred_state> snapshot_rest(snapshot::checkpoint_id id) override {
    return table_.freeze(id);
  }
  void checkpoint_completed(snapshot::checkpoint_id id) override { table_.confirm(id); }
  void restore_state(std::span<const std::byte> bytes) override {
    index_.clear();
    if (detail::is_version(bytes, 2)) {
      auto [watermark, late] = detail::restore_with_table<detail::watermark_head>(bytes, "top_n", table_);
      watermark_ = detail::watermark_of(watermark);
      late_records_ = late;
      detail::index_by_space(table_, index_);
      return;
    }
    table_.clear();
    auto [watermark, late, groups] =
        detail::decode_state<std::tuple<std::pair<bool, std::uint64_t>, std::uint64_t, groups_t>>(bytes, "top_n");
    watermark_ = detail::watermark_of(watermark);
    late_records_ = late;
    for (auto& [t, key, records] : groups) {
      std::vector<T>& held = group(key, t);
      for (T& record : records) hold(held, std::move(record));
    }
  }

  std::uint64_t late_records() const noexcept { return late_records_; }
  // Records held, over every key and time.
  std::size_t held_records() const {
    std::size_t n = 0;
    table_.for_each([&](const namespaced<K>&, const std::vector<T>& held) { n += held.size(); });
    return n;
  }

 private:
  using groups_t = std::vector<std::tuple<std::uint64_t, K, std::vector<T>>>;
  using table_t = state_table<namespaced<K>, std::vector<T>>;
  using ref = typename table_t::ref;

  // The records held for (key, time), to change (made, and indexed, on first use).
  std::vector<T>& group(const K& key, std::uint64_t t) {
    auto [at, inserted] = table_.emplace(namespaced<K>{key, t});
    if (inserted) index_[t].push_back(at);
    return table_.modify(at);
  }
  static bool record_less(const T& a, const T& b) {
    if constexpr (std::totally_ordered<T>) {
      return a < b;
    } else {
      std::vector<std::byte> x, y;
      buffers::encode_to(x, a);
      buffers::encode_to(y, b);
      return x < y;
    }
  }
  // Output order: rank descending, then record ascending.
  bool ahead(const T& a, const T& b) const {
    const Rank ra = fns_.rank(a);
    const Rank rb = fns_.rank(b);
    if (ra != rb) return rb < ra;
    return record_less(a, b);
  }
  // Adds `record` to a group's records (in output order) unless it ranks below the n-th, and drops
  // those that now do.
  void hold(std::vector<T>& held, T record) {
    if (held.size() >= n_ && fns_.rank(record) < fns_.rank(held[n_ - 1])) return;
    auto at = std::upper_bound(held.begin(), held.end(), record, [this](const T& a, const T& b) { return ahead(a, b); });
    held.insert(at, std::move(record));
    if (held.size() <= n_) return;
    const Rank nth = fns_.rank(held[n_ - 1]);
    held.erase(std::find_if(held.begin() + static_cast<std::ptrdiff_t>(n_), held.end(),
                            [&](const T& x) { return fns_.rank(x) < nth; }),
               held.end());
  }
  void fire(std::uint64_t through) {
    while (!index_.empty() && index_.begin()->first <= through) {
      std::vector<ref>& keys = index_.begin()->second;
      detail::sort_by_key(table_, keys);
      for (const ref& at : keys) {
        const std::vector<T>& held = table_.value(at);
        std::size_t place = 1;
        for (std::size_t i = 0; i < held.size(); ++i) {
          if (i > 0 && fns_.rank(held[i]) < fns_.rank(held[i - 1])) place = i + 1;
          out_->collect(fns_.emit(table_.key(at).key, place, held[i]));
          runtime::pace_point();
        }
      }
      for (const ref& at : keys) {
        table_.erase(at);
        runtime::pace_point();
      }
      index_.erase(index_.begin());
    }
  }

  std::size_t n_;
  functions fns_;
  collector<Out>* out_;
  table_t table_;                                     // (key, time) -> held records
  std::map<std::uint64_t, std::vector<ref>> index_;  // time -> its entries, rebuilt on restore
  std::optional<std::uint64_t> watermark_;  // the greatest seen; the largest time after the end
  std::uint64_t late_records_ = 0;
};

}  // namespace sluice::dataflow
