#pragma once
// The operators a job chains inside a task (collector.hpp): stateless map, filter and flat_map, and
// a keyed, stateful running aggregate that emits at the end of the input; the event-time window
// operators (tumbling and sliding window aggregates, top-N) are in windows.hpp, which this header
// includes at its end. Keyed operators sit after a key_by exchange, so every record of a key reaches
// the same task and its state is local. Results are emitted in key order, so a run's output is
// deterministic: the running aggregate keeps a hash table and sorts its keys once, when it emits
// (and when it snapshots, so a checkpoint's bytes are deterministic too).

#include <sluice/buffers/codec.hpp>
#include <sluice/dataflow/collector.hpp>
#include <sluice/dataflow/key_hash.hpp>

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
// Fires, oldest first, every window of `windows` (a map from window start to its per-key contents)
// that due(start) says is due: emit_window(start, contents), then forgets it. `fired_through` becomes
// the end of the last window fired (windows starting before it are done).
template <class Windows, class Due, class Emit>
void fire_windows(Windows& windows, std::uint64_t size, std::optional<std::uint64_t>& fired_through, Due due,
                  Emit emit_window) {
  while (!windows.empty() && due(windows.begin()->first)) {
    const std::uint64_t start = windows.begin()->first;
    emit_window(start, windows.begin()->second);
    windows.erase(windows.begin());
    fired_through = start + size;
  }
}
}  // namespace detail

// Folds every record of a key into an accumulator; at the end of the input emits emit(key, acc) for
// every key, in key order, once (also across a recovery: the state remembers it was done).
template <class K, class In, class Acc, class Out>
class keyed_aggregate final : public collector<In>, public stateful, public chain_part {
 public:
  struct functions {
    std::function<K(const In&)> key;
    std::function<void(Acc&, const In&)> fold;
    std::function<Out(const K&, const Acc&)> emit;
  };
  keyed_aggregate(functions fns, collector<Out>& out) : fns_(std::move(fns)), out_(&out) {}

  void collect(const In& record) override {
    auto [it, inserted] = state_.try_emplace(fns_.key(record));
    fns_.fold(it->second, record);
  }
  void watermark(std::uint64_t t) override { out_->watermark(t); }
  void end_of_data() override {
    if (!emitted_) {
      for (const entry* e : sorted()) out_->collect(fns_.emit(e->first, e->second));
      emitted_ = true;
    }
    out_->end_of_data();
  }
  // Version 1 as with the ordered map before: (emitted, entries in key order).
  std::vector<std::byte> snapshot_state() const override {
    std::vector<std::pair<K, Acc>> entries;
    entries.reserve(state_.size());
    for (const entry* e : sorted()) entries.emplace_back(e->first, e->second);
    return detail::encode_state(std::make_pair(emitted_, entries));
  }
  void restore_state(std::span<const std::byte> bytes) override {
    auto [emitted, entries] =
        detail::decode_state<std::pair<bool, std::vector<std::pair<K, Acc>>>>(bytes, "keyed aggregate");
    emitted_ = emitted;
    state_.clear();
    state_.reserve(entries.size());
    for (auto& [key, acc] : entries) state_.insert_or_assign(std::move(key), std::move(acc));
  }
  std::size_t keys() const noexcept { return state_.size(); }

 private:
  using table = std::unordered_map<K, Acc, key_hash<K>>;
  using entry = typename table::value_type;
  std::vector<const entry*> sorted() const {
    std::vector<const entry*> out;
    out.reserve(state_.size());
    for (const entry& e : state_) out.push_back(&e);
    std::sort(out.begin(), out.end(), [](const entry* a, const entry* b) { return a->first < b->first; });
    return out;
  }

  functions fns_;
  collector<Out>* out_;
  table state_;
  bool emitted_ = false;
};

}  // namespace sluice::dataflow

// The window operators, which use the state codec above. windows.hpp includes this header too:
// included in either order, both are complete, as this include comes after all of the above.
#include <sluice/dataflow/windows.hpp>
