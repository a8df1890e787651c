#pragma once
// key_order_emission: a keyed operator's emission of its whole state table in key order, in bounded
// steps (collector.hpp, stepped_end), so that a task takes barriers in the middle of it.
//
// The steps: collect the refs of the entries to emit a few key groups at a time (a group's cells are
// a linear scan), cutting them into runs of run_length; sort one run per step; then emit in key
// order by a heap over the runs' heads, `budget` entries per step. The table must not change while
// an emission is active (an operator emits once its input has ended, when nothing writes to it);
// refs stay valid across a snapshot's freeze (cells never move: state_table.hpp). Every step calls
// runtime::pace_point in proportion to its work, so a loop over the steps off a task (a test driving
// the operator by hand, on a fiber) still leaves the executor room.

#include <sluice/dataflow/key_group.hpp>
#include <sluice/runtime/fiber.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::dataflow::detail {

template <class Table>
class key_order_emission {
 public:
  using ref = typename Table::ref;
  static constexpr std::size_t run_length = 4096;

  // Begins an emission (whatever one was active is dropped).
  void start() {
    *this = key_order_emission{};
    active_ = true;
  }
  bool active() const noexcept { return active_; }

  // One step of about `budget` entries' work: collects refs r with keep(r), sorts a run, or emits
  // up to `budget` entries with emit(r), smallest key first. True once every entry is emitted (the
  // emission is then inactive and its memory freed).
  template <class Keep, class Emit>
  bool step(const Table& table, std::size_t budget, Keep keep, Emit emit) {
    if (!active_) return true;
    if (next_group_ < table.key_groups()) {
      collect(table, budget, keep);
      return false;
    }
    if (sorted_runs_ < run_ends_.size()) {
      sort_run(table);
      return false;
    }
    if (!merging_) start_merge(table);
    const auto later = [&](std::uint32_t a, std::uint32_t b) {
      return table.key(refs_[heads_[b]]) < table.key(refs_[heads_[a]]);
    };
    for (std::size_t n = 0; n < budget && !heap_.empty(); ++n) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      const std::uint32_t run = heap_.back();
      emit(refs_[heads_[run]]);
      if (++heads_[run] == run_ends_[run]) {
        heap_.pop_back();
      } else {
        std::push_heap(heap_.begin(), heap_.end(), later);
      }
      runtime::pace_point();
    }
    if (!heap_.empty()) return false;
    *this = key_order_emission{};
    return true;
  }

 private:
  template <class Keep>
  void collect(const Table& table, std::size_t budget, Keep& keep) {
    const std::size_t before = refs_.size();
    while (next_group_ < table.key_groups() && refs_.size() - before < budget) {
      table.for_each_ref_in(next_group_++, [&](ref r) {
        if (keep(r)) refs_.push_back(r);
      });
    }
    // Full runs are cut as they fill; the last, shorter one once every group is collected.
    std::size_t at = run_ends_.empty() ? 0 : run_ends_.back();
    while (refs_.size() - at >= run_length) {
      at += run_length;
      run_ends_.push_back(at);
    }
    if (next_group_ == table.key_groups() && at < refs_.size()) run_ends_.push_back(refs_.size());
    runtime::pace_point((refs_.size() - before) / 8 + 1);
  }
  std::size_t run_start(std::size_t run) const noexcept { return run == 0 ? 0 : run_ends_[run - 1]; }
  void sort_run(const Table& table) {
    const std::size_t run = sorted_runs_++;
    const auto first = refs_.begin() + static_cast<std::ptrdiff_t>(run_start(run));
    const auto last = refs_.begin() + static_cast<std::ptrdiff_t>(run_ends_[run]);
    std::sort(first, last, [&](ref a, ref b) { return table.key(a) < table.key(b); });
    runtime::pace_point(static_cast<std::size_t>(last - first) / 4 + 1);
  }
  void start_merge(const Table& table) {
    merging_ = true;
    heads_.resize(run_ends_.size());
    for (std::size_t run = 0; run < run_ends_.size(); ++run) {
      heads_[run] = run_start(run);
      if (heads_[run] < run_ends_[run]) heap_.push_back(static_cast<std::uint32_t>(run));
    }
    std::make_heap(heap_.begin(), heap_.end(), [&](std::uint32_t a, std::uint32_t b) {
      return table.key(refs_[heads_[b]]) < table.key(refs_[heads_[a]]);
    });
  }

  bool active_ = false;
  bool merging_ = false;
  key_group next_group_ = 0;
  std::vector<ref> refs_;             // what is emitted, sorted run by run
  std::vector<std::size_t> run_ends_;  // run i is [run_ends_[i - 1] (0 for the first), run_ends_[i])
  std::size_t sorted_runs_ = 0;
  std::vector<std::size_t> heads_;    // per run: its next entry to emit
  std::vector<std::uint32_t> heap_;   // runs with entries left: a min-heap by their heads' keys
};

}  // namespace sluice::dataflow::detail
