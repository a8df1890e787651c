#pragma once
// The two-input tumbling-window join: keyed_stream::window_join (job.hpp).
//
// A join stage has one input gate for both inputs: the left input's channels first, then the
// right's (task_builder::input_channels()). join_input decodes each record by the side its channel
// belongs to; the task's watermark is the smallest over the channels of both inputs, so a window
// fires only once both sides are past its end. A window [start, start + size) keeps, per key, the
// left and the right records in arrival order; when it fires it emits emit(start, key, l, r) for
// every pair, keys in key order, and forgets the window. Its state (every open window, in a state
// table by key group: state_table.hpp) is in each checkpoint, so a restored join emits each pair
// exactly once.

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/operators.hpp>
#include <sluice/dataflow/state_table.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::dataflow {

template <class K, class L, class R, class Out>
class tumbling_window_join final : public stateful, public chain_part {
 public:
  struct functions {
    std::function<std::uint64_t(const L&)> left_time;
    std::function<std::uint64_t(const R&)> right_time;
    std::function<K(const L&)> left_key;
    std::function<K(const R&)> right_key;
    std::function<Out(std::uint64_t, const K&, const L&, const R&)> emit;
  };
  tumbling_window_join(std::uint64_t size, functions fns, collector<Out>& out,
                       std::size_t key_groups = default_key_groups)
      : size_(size), fns_(std::move(fns)), out_(&out), table_("window join", key_groups) {
    if (size == 0) throw std::invalid_argument("window join: window size must be at least 1");
  }

  void left(const L& record) {
    if (auto* sides = window_of(fns_.left_time(record), fns_.left_key(record))) sides->first.push_back(record);
  }
  void right(const R& record) {
    if (auto* sides = window_of(fns_.right_time(record), fns_.right_key(record))) sides->second.push_back(record);
  }
  void watermark(std::uint64_t t) {
    fire([&](std::uint64_t start) { return start + size_ - 1 <= t; });
    out_->watermark(t);
  }
  void end_of_data() {
    fire([](std::uint64_t) { return true; });
    out_->end_of_data();
  }

  // Version 2: (fired through + 1 or 0, late records), then the table of (key, window start) -> the
  // window's left and right records (state_table.hpp). Version 1, (fired, late records, windows
  // with their keys in order), still restores.
  std::vector<std::byte> snapshot_state() const override {
    const std::uint64_t fired = fired_through_ ? *fired_through_ + 1 : 0;  // 0: none
    return detail::encode_head(2, std::make_tuple(fired, late_records_));
  }
  std::unique_ptr<snapshot::deferred_state> snapshot_rest(snapshot::checkpoint_id id) override {
    return table_.freeze(id);
  }
  void checkpoint_completed(snapshot::checkpoint_id id) override { table_.confirm(id); }
  void restore_state(std::span<const std::byte> bytes) override {
    index_.clear();
    if (detail::is_version(bytes, 2)) {
      auto [fired, late] =
          detail::restore_with_table<std::tuple<std::uint64_t, std::uint64_t>>(bytes, "window join", table_);
      set_fired(fired);
      late_records_ = late;
      detail::index_by_space(table_, index_);
      return;
    }
    table_.clear();
    auto [fired, late, windows] =
        detail::decode_state<std::tuple<std::uint64_t, std::uint64_t, windows_t>>(bytes, "window join");
    set_fired(fired);
    late_records_ = late;
    for (auto& [start, keys] : windows) {
      for (auto& [key, sides] : keys) sides_of(start, key) = std::move(sides);
    }
  }
  // Records whose window had fired when they came (their input was not in time order).
  std::uint64_t late_records() const noexcept { return late_records_; }
  std::size_t open_windows() const noexcept { return index_.size(); }

 private:
  using sides_t = std::pair<std::vector<L>, std::vector<R>>;
  using entries_t = std::vector<std::pair<K, sides_t>>;
  using windows_t = std::vector<std::pair<std::uint64_t, entries_t>>;
  using table_t = state_table<namespaced<K>, sides_t>;
  using ref = typename table_t::ref;

  void set_fired(std::uint64_t fired) {
    fired_through_ = fired == 0 ? std::nullopt : std::optional<std::uint64_t>(fired - 1);
  }
  sides_t& sides_of(std::uint64_t start, const K& key) {
    auto [at, inserted] = table_.emplace(namespaced<K>{key, start});
    if (inserted) index_[start].push_back(at);
    return table_.modify(at);
  }
  sides_t* window_of(std::uint64_t t, const K& key) {
    const std::uint64_t start = t - t % size_;
    if (fired_through_ && start < *fired_through_) {
      ++late_records_;
      return nullptr;
    }
    return &sides_of(start, key);
  }
  // Fires, oldest first, every window due(start) says is due: its pairs, keys in key order; then
  // forgets it. fired_through_ becomes the end of the last window fired.
  template <class Due>
  void fire(Due due) {
    while (!index_.empty() && due(index_.begin()->first)) {
      const std::uint64_t start = index_.begin()->first;
      std::vector<ref>& keys = index_.begin()->second;
      detail::sort_by_key(table_, keys);
      for (const ref& at : keys) {
        const sides_t& sides = table_.value(at);
        for (const L& l : sides.first) {
          for (const R& r : sides.second) {
            out_->collect(fns_.emit(start, table_.key(at).key, l, r));
            runtime::pace_point();
          }
        }
      }
      for (const ref& at : keys) {
        table_.erase(at);
        runtime::pace_point();
      }
      index_.erase(index_.begin());
      fired_through_ = start + size_;
    }
  }

  std::uint64_t size_;
  functions fns_;
  collector<Out>* out_;
  table_t table_;                                     // (key, window start) -> both sides' records
  std::map<std::uint64_t, std::vector<ref>> index_;  // window start -> its entries, rebuilt on restore
  std::optional<std::uint64_t> fired_through_;
  std::uint64_t late_records_ = 0;
};

// The head of a join task (task_parts.hpp): channels below the left input's count carry L, the rest R.
template <class K, class L, class R, class Out>
using join_input = two_input_head<L, R, tumbling_window_join<K, L, R, Out>>;

template <class K, class T>
template <class R, class Out>
stream<Out> keyed_stream<K, T>::window_join(const keyed_stream<K, R>& right, std::string name, std::size_t parallelism,
                                            std::uint64_t size, std::function<std::uint64_t(const T&)> left_time,
                                            std::function<std::uint64_t(const R&)> right_time,
                                            std::function<Out(std::uint64_t, const K&, const T&, const R&)> emit) const {
  if (up_.job() != right.upstream().job()) throw std::invalid_argument("window join: both inputs must be of one job");
  if (size == 0) throw std::invalid_argument("window join '" + name + "': window size must be at least 1");
  refuse_ttl("window join", name);
  right.refuse_ttl("window join", name);
  const std::size_t stage = exchange_with(right, std::move(name), parallelism);
  using op = tumbling_window_join<K, T, R, Out>;
  typename op::functions fns{std::move(left_time), std::move(right_time), key_, right.key(), std::move(emit)};
  // Identity: the window's size, named as `sluice join --window-ms` names it.
  return stream<Out>(up_.job(), stage, [size, fns](task_builder& b, collector<Out>& down) {
    auto& join = b.make<op>(size, fns, down, b.key_groups());
    b.add_state(join);
    b.set_input(b.make<join_input<K, T, R, Out>>(b.input_channels().at(0), join));
  }, keyed_identity(stage, {"op=window_join", "window_join.kind=tumbling",
                            "window_join.window_ms=" + std::to_string(size)}));
}

}  // namespace sluice::dataflow
