#pragma once
// combine_op: local pre-aggregation before a key exchange (Flink's local-global aggregation). On the
// upstream task, every record folds into its key's partial accumulator in a bounded table; the
// table's (key, partial) pairs go downstream instead of the records, to an aggregate that merges
// them. The table is flushed (every pair emitted, the table emptied):
//   - at every checkpoint, before the task snapshots and passes the barrier on (flushable), so no
//     partial is state: exactly once holds for aligned and unaligned checkpoints alike;
//   - before a watermark is passed on (a window downstream must not see the watermark first);
//   - at the end of the input;
//   - when it holds max_keys keys (the bound on its memory).
// Use it through keyed_stream::combine (job.hpp). The order of a flush's pairs is the table's; the
// aggregate downstream orders its results by key.
//
// Adaptive: a table that fills having folded fewer than two records per key reduces little (a key
// space far larger than the table: a million user ids through a table of 16,384), and its hashing
// costs the task more than the records it saves downstream. The combiner then passes the next
// records on as one-record partials (the same pairs the table would have flushed for keys seen
// once), 16 tables' worth of them, and tries its table again. Only a table of at least
// adaptive_min_keys keys is judged: a smaller one is too small a sample.

#include <sluice/dataflow/collector.hpp>
#include <sluice/dataflow/key_hash.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace sluice::dataflow {

template <class K, class In, class Acc>
class combine_op final : public collector<In>, public flushable, public chain_part {
 public:
  using partial = std::pair<K, Acc>;
  struct functions {
    std::function<K(const In&)> key;
    std::function<void(Acc&, const In&)> fold;
  };
  combine_op(functions fns, std::size_t max_keys, collector<partial>& out)
      : fns_(std::move(fns)), max_keys_(max_keys), out_(&out) {
    if (max_keys == 0) throw std::invalid_argument("combine: max_keys must be at least 1");
    table_.reserve(max_keys < 4096 ? max_keys : 4096);
  }

  static constexpr std::size_t adaptive_min_keys = 64;
  static constexpr std::size_t pass_through_tables = 16;

  void collect(const In& record) override {
    if (passing_ > 0) {
      --passing_;
      ++passed_;
      partial one(fns_.key(record), Acc{});
      fns_.fold(one.second, record);
      out_->collect(one);
      return;
    }
    auto [it, inserted] = table_.try_emplace(fns_.key(record));
    fns_.fold(it->second, record);
    ++folded_;
    if (table_.size() >= max_keys_) {
      const bool reduces_little = table_.size() >= adaptive_min_keys && folded_ < 2 * table_.size();
      flush();
      if (reduces_little) passing_ = pass_through_tables * max_keys_;
    }
  }
  void watermark(std::uint64_t t) override {
    flush();
    out_->watermark(t);
  }
  void end_of_data() override {
    flush();
    out_->end_of_data();
  }
  void flush() override {
    folded_ = 0;
    if (table_.empty()) return;
    for (auto& [key, acc] : table_) out_->collect(partial(key, std::move(acc)));
    table_.clear();
    ++flushes_;
  }

  std::size_t keys() const noexcept { return table_.size(); }
  // Flushes that emitted something.
  std::uint64_t flushes() const noexcept { return flushes_; }
  // Records passed on as one-record partials, and how many more will be before the table is tried.
  std::uint64_t passed_through() const noexcept { return passed_; }
  std::size_t passing() const noexcept { return passing_; }

 private:
  functions fns_;
  std::size_t max_keys_;
  collector<partial>* out_;
  std::unordered_map<K, Acc, key_hash<K>> table_;
  std::uint64_t flushes_ = 0;
  std::size_t folded_ = 0;   // records folded into the table since its last flush
  std::size_t passing_ = 0;  // records still to pass through before the table is tried again
  std::uint64_t passed_ = 0;
};

}  // namespace sluice::dataflow
