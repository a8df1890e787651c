#pragma once
// The operators a job chains inside a task (collector.hpp): stateless map, filter and flat_map, and
// a keyed, stateful running aggregate that emits at the end of the input; the event-time window
// operators (tumbling and sliding window aggregates, top-N) are in windows.hpp, which this header
// includes at its end. Keyed operators sit after a key_by exchange, so every record of a key reaches
// the same task and its state is local. Results are emitted in key order, so a run's output is
// deterministic: the running aggregate keeps its state in a state_table (state_table.hpp) and emits
// it in key order at the end of its input, in steps (key_order_emission.hpp).

#include <sluice/buffers/codec.hpp>
#include <sluice/dataflow/collector.hpp>
#include <sluice/dataflow/key_hash.hpp>
#include <sluice/dataflow/key_order_emission.hpp>
#include <sluice/dataflow/state_table.hpp>
#include <sluice/dataflow/state_ttl.hpp>
#include <sluice/runtime/fiber.hpp>

#include <algorithm>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::dataflow {

// What flat_map's function emits into.
template <class T>
class emitter {
 public:
  explicit emitter(collector<T>& out) noexcept : out_(&out) {}
  void emit(const T& record) { out_->collect(record); }

 private:
  collector<T>* out_;
};

template <class In, class Out>
class map_op final : public collector<In>, public chain_part {
 public:
  map_op(std::function<Out(const In&)> fn, collector<Out>& out) : fn_(std::move(fn)), out_(&out) {}
  void collect(const In& record) override { out_->collect(fn_(record)); }
  void watermark(std::uint64_t t) override { out_->watermark(t); }
  void end_of_data() override { out_->end_of_data(); }

 private:
  std::function<Out(const In&)> fn_;
  collector<Out>* out_;
};

template <class T>
class filter_op final : public collector<T>, public chain_part {
 public:
  filter_op(std::function<bool(const T&)> keep, collector<T>& out) : keep_(std::move(keep)), out_(&out) {}
  void collect(const T& record) override {
    if (keep_(record)) out_->collect(record);
  }
  void watermark(std::uint64_t t) override { out_->watermark(t); }
  void end_of_data() override { out_->end_of_data(); }

 private:
  std::function<bool(const T&)> keep_;
  collector<T>* out_;
};

template <class In, class Out>
class flat_map_op final : public collector<In>, public chain_part {
 public:
  flat_map_op(std::function<void(const In&, emitter<Out>&)> fn, collector<Out>& out)
      : fn_(std::move(fn)), emit_(out), out_(&out) {}
  void collect(const In& record) override { fn_(record, emit_); }
  void watermark(std::uint64_t t) override { out_->watermark(t); }
  void end_of_data() override { out_->end_of_data(); }

 private:
  std::function<void(const In&, emitter<Out>&)> fn_;
  emitter<Out> emit_;
  collector<Out>* out_;
};

namespace detail {
// State bytes: a version byte, then the codec encoding of `value`.
template <class S>
std::vector<std::byte> encode_state(const S& value) {
  std::vector<std::byte> out{std::byte{1}};
  buffers::encode_to(out, value);
  return out;
}
template <class S>
S decode_state(std::span<const std::byte> bytes, const char* what) {
  if (bytes.empty() || bytes[0] != std::byte{1}) {
    throw std::runtime_error(std::string("restore ") + what + ": unknown state version");
  }
  try {
    return buffers::decode_from<S>(bytes.subspan(1));
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("restore ") + what + ": " + e.what());
  }
}
// The state of an operator with a state table: a version byte and its scalar state `head` (codec)
// from snapshot_state(), then the table's stream from snapshot_rest() (state_table.hpp).
template <class Head>
std::vector<std::byte> encode_head(std::uint8_t version, const Head& head) {
  std::vector<std::byte> out{std::byte{version}};
  buffers::encode_to(out, head);
  return out;
}
// Whether `bytes` is such a state of `version`.
inline bool is_version(std::span<const std::byte> bytes, std::uint8_t version) noexcept {
  return !bytes.empty() && bytes[0] == std::byte{version};
}
// Reads such a state into `table` and returns its head; errors name `what`. The table's stream
// replaces its state, or applies on it when a delta (state_table.hpp); before it, before_table(head)
// runs (an operator setting the table's time from the head).
template <class Head, class Table, class Before>
Head restore_with_table(std::span<const std::byte> bytes, const std::string& what, Table& table, Before before_table) {
  buffers::byte_reader r(bytes.subspan(1));
  Head head;
  try {
    head = buffers::codec<Head>::decode(r);
  } catch (const std::exception& e) {
    throw std::runtime_error("restore " + what + ": " + e.what());
  }
  before_table(head);
  table.restore(r);
  return head;
}
template <class Head, class Table>
Head restore_with_table(std::span<const std::byte> bytes, const std::string& what, Table& table) {
  return restore_with_table<Head>(bytes, what, table, [](const Head&) {});
}
// Every entry of a table of namespaced keys, indexed by its namespace (a window start, a time).
template <class Table, class Index>
void index_by_space(const Table& table, Index& index) {
  table.for_each_ref([&](const auto& at) {
    index[table.key(at).space].push_back(at);
    runtime::pace_point();
  });
}

// Sorts `items` by `less` in paced steps (runtime::pace_point; docs/state.md): runs of 1024 sorted
// one at a time, then merged pairwise, so on a fiber no step holds the executor for long, however
// many keys a window or the end of the input emits. Not stable (as std::sort).
template <class T, class Less>
void paced_sort(std::vector<T>& items, Less less) {
  constexpr std::size_t run = 1024;
  const std::size_t n = items.size();
  for (std::size_t at = 0; at < n; at += run) {
    const std::size_t end = std::min(at + run, n);
    std::sort(items.begin() + static_cast<std::ptrdiff_t>(at), items.begin() + static_cast<std::ptrdiff_t>(end), less);
    runtime::pace_point((end - at) / 4);
  }
  if (n <= run) return;
  std::vector<T> merged;
  merged.reserve(n);
  for (std::size_t width = run; width < n; width *= 2) {
    merged.clear();
    for (std::size_t lo = 0; lo < n; lo += 2 * width) {
      std::size_t a = lo;
      const std::size_t a_end = std::min(lo + width, n);
      std::size_t b = a_end;
      const std::size_t b_end = std::min(lo + 2 * width, n);
      while (a < a_end || b < b_end) {
        const bool take_b = a == a_end || (b < b_end && less(items[b], items[a]));
        merged.push_back(std::move(items[take_b ? b++ : a++]));
        if ((merged.size() & 7) == 0) runtime::pace_point();
      }
    }
    items.swap(merged);
  }
}
// Sorts refs of a table by their entries' keys (paced).
template <class Table, class Refs>
void sort_by_key(const Table& table, Refs& refs) {
  paced_sort(refs, [&](const auto& a, const auto& b) { return table.key(a) < table.key(b); });
}
}  // namespace detail

// Folds every record of a key into an accumulator; at the end of the input emits emit(key, acc) for
// every key, in key order, once (also across a recovery: the state remembers it was done). The
// accumulators are in a state_table by key group: a snapshot freezes it and writes it in slices.
// The emission at the end of the input runs in steps between barriers (stepped_end): a checkpoint
// taken in the middle of it records the last key emitted, and a recovery from it emits the keys
// after that one. With a state TTL (state_ttl.hpp) a key's accumulator expires a ttl after its last
// record: the next record of the key starts from Acc{}, and the end of the input emits only live
// keys.
template <class K, class In, class Acc, class Out>
class keyed_aggregate final : public collector<In>, public stateful, public chain_part, public stepped_end {
 public:
  struct functions {
    std::function<K(const In&)> key;
    std::function<void(Acc&, const In&)> fold;
    std::function<Out(const K&, const Acc&)> emit;
  };
  keyed_aggregate(functions fns, collector<Out>& out, std::size_t key_groups = default_key_groups,
                  ttl_spec<In> ttl = {})
      : fns_(std::move(fns)), out_(&out), state_("keyed aggregate", key_groups), clock_(ttl.ttl),
        ttl_time_(std::move(ttl.time)) {
    state_.set_ttl(ttl.ttl.ttl);
    if (clock_.event() && !ttl_time_) throw std::invalid_argument("keyed aggregate: an event-time TTL without a time");
  }

  void collect(const In& record) override {
    if (state_.ttl() == 0) {
      fns_.fold(state_.upsert(fns_.key(record)), record);
      return;
    }
    clock_.enter(state_, clock_.event() ? ttl_time_(record) : 0, watermark_);
    fns_.fold(state_.upsert(fns_.key(record)), record);
    clock_.leave(state_);
    state_.sweep(detail::ttl_sweep_per_record, [this](auto r) { state_.erase(r); });
  }
  void watermark(std::uint64_t t) override {
    watermark_ = std::max(watermark_, t);
    if (clock_.event()) state_.advance_time(t);
    out_->watermark(t);
  }
  void end_of_data() override {
    if (emitted_) {
      out_->end_of_data();
      return;
    }
    if (clock_.processing()) state_.advance_time(clock_.fresh());
    emission_.start();
    last_.reset();
    end_unless_stepped();
  }
  bool ending() const noexcept override { return emission_.active(); }
  void continue_end() override {
    const auto keep = [this](ref r) { return !state_.expired(r) && (!resume_after_ || *resume_after_ < state_.key(r)); };
    const auto emit = [this](ref r) {
      out_->collect(fns_.emit(state_.key(r), state_.value(r)));
      last_ = r;
    };
    if (!emission_.step(state_, runtime::pace_budget, keep, emit)) return;
    emitted_ = true;
    resume_after_.reset();
    last_.reset();
    out_->end_of_data();
  }
  // Version 5: (emitted, watermark, whether the emission is under way, the last key it emitted),
  // then the table (state_table.hpp) from snapshot_rest(). Versions 4 ((emitted, watermark)), 3
  // (emitted, then the table) and 1 (the entries in key order) still restore.
  std::vector<std::byte> snapshot_state() const override {
    std::optional<K> through = resume_after_;
    if (last_) through = state_.key(*last_);
    return detail::encode_head(5, std::make_tuple(emitted_, watermark_, through.has_value(), through.value_or(K{})));
  }
  std::unique_ptr<snapshot::deferred_state> snapshot_rest(snapshot::checkpoint_id id) override {
    return state_.freeze(id);
  }
  void checkpoint_completed(snapshot::checkpoint_id id) override { state_.confirm(id); }
  void restore_state(std::span<const std::byte> bytes) override {
    resume_after_.reset();
    if (!bytes.empty() && bytes[0] == std::byte{1}) {
      state_.clear();
      auto [emitted, entries] =
          detail::decode_state<std::pair<bool, std::vector<std::pair<K, Acc>>>>(bytes, "keyed aggregate");
      emitted_ = emitted;
      for (auto& [key, acc] : entries) state_.upsert(key) = std::move(acc);
      return;
    }
    if (detail::is_version(bytes, 3)) {
      emitted_ = detail::restore_with_table<bool>(bytes, "keyed aggregate", state_);
      return;
    }
    const auto set_time = [this](std::uint64_t watermark) {
      state_.set_time(clock_.processing() ? clock_.fresh() : watermark);
    };
    if (detail::is_version(bytes, 4)) {
      std::tie(emitted_, watermark_) = detail::restore_with_table<std::pair<bool, std::uint64_t>>(
          bytes, "keyed aggregate", state_, [&](const auto& head) { set_time(head.second); });
      return;
    }
    if (!detail::is_version(bytes, 5)) throw std::runtime_error("restore keyed aggregate: unknown state version");
    const auto [emitted, watermark, resuming, through] =
        detail::restore_with_table<std::tuple<bool, std::uint64_t, bool, K>>(
            bytes, "keyed aggregate", state_, [&](const auto& head) { set_time(std::get<1>(head)); });
    emitted_ = emitted;
    watermark_ = watermark;
    if (resuming && !runtime::plant_active("emission-cursor-lost")) resume_after_ = through;
  }
  // Keys with an accumulator (expired ones the table has not dropped yet too).
  std::size_t keys() const noexcept { return state_.size(); }

 private:
  using ref = typename state_table<K, Acc>::ref;

  functions fns_;
  collector<Out>* out_;
  state_table<K, Acc> state_;
  detail::ttl_clock clock_;
  std::function<std::uint64_t(const In&)> ttl_time_;  // an event-time TTL's record time
  std::uint64_t watermark_ = 0;
  bool emitted_ = false;
  detail::key_order_emission<state_table<K, Acc>> emission_;  // the end of the input's
  std::optional<ref> last_;          // the last entry the emission emitted
  std::optional<K> resume_after_;    // restored mid-emission: the keys up to this one were emitted
};

}  // namespace sluice::dataflow

// The window operators, which use the state codec above. windows.hpp includes this header too:
// included in either order, both are complete, as this include comes after all of the above.
#include <sluice/dataflow/windows.hpp>
