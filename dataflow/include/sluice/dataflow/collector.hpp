#pragma once
// collector<T>: how chained operators hand records on inside one task, without serialization. An
// operator is a collector of its input that calls the collector of its output; the last one in a
// task is the task's output (a partition or a sink), which serializes.
//
// Besides records, two signals flow down a chain, in order with the records:
//   watermark(t)   every record with event time <= t has been seen (event-time windows fire on it);
//   end_of_data()  the input is exhausted: operators that hold results back emit them now.
// Operators with state also implement `stateful`: the task snapshots them, in chain order, at a
// checkpoint and restores them on recovery. Operators that hold records back between inputs (a
// combiner) implement `flushable`: the task flushes them before it snapshots at a barrier. Operators
// whose end of the input is long work implement `stepped_end`: the task runs it in steps, between
// barriers. Everything runs on the task's executor.

#include <sluice/snapshot/deferred_state.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace sluice::dataflow {

template <class T>
class collector {
 public:
  virtual ~collector() = default;
  virtual void collect(const T& record) = 0;
  virtual void watermark(std::uint64_t time) = 0;
  virtual void end_of_data() = 0;
};

// Operator state as bytes: what a checkpoint stores for one operator. At a snapshot the task calls
// snapshot_state() then snapshot_rest(), both at once on its executor: the state's bytes are what
// the first returns followed by what the second (keyed state: a frozen state table) writes in
// slices while the task goes on (docs/state.md). Both are the synchronous part of the snapshot, so
// each must be O(1) in the size of a keyed state.
class stateful {
 public:
  virtual ~stateful() = default;
  virtual std::vector<std::byte> snapshot_state() const = 0;
  // The part written after the barrier, in slices (deferred_state.hpp), for `checkpoint`.
  virtual std::unique_ptr<snapshot::deferred_state> snapshot_rest(snapshot::checkpoint_id /*checkpoint*/) {
    return nullptr;
  }
  // Called before any record, with the bytes of the checkpoint resumed from (both parts). When that
  // state is a chain (a keyed table's incremental snapshots: its rest is a delta on an earlier
  // checkpoint's), called once per link, oldest first: the first whole, each next applied on it.
  // Throws std::runtime_error when the bytes do not decode or do not follow.
  virtual void restore_state(std::span<const std::byte> bytes) = 0;
  // The checkpoint completed (durable, its manifest written): a keyed table that froze for it may
  // write its next snapshot as a delta on it.
  virtual void checkpoint_completed(snapshot::checkpoint_id /*checkpoint*/) {}
};

// An operator that holds results back (a combiner's partial aggregates, combiner.hpp). The task
// calls flush() at every checkpoint, before it snapshots and passes the barrier on: what was held
// goes downstream ahead of the barrier, so none of it is state the checkpoint would have to keep.
class flushable {
 public:
  virtual ~flushable() = default;
  virtual void flush() = 0;
};

// An operator whose end of the input is long work (a keyed aggregate emitting every key of a large
// table): end_of_data() starts it, and the task calls continue_end() between its other work until
// ending() is false, taking barriers and messages in between. So a barrier that comes meanwhile
// waits for one step, not for the whole emission, and the operator's snapshot records how far it
// got (docs/state.md, "The end of the input"). The operator passes end_of_data() on down the chain
// when it is done. Driven by hand, off a task (a test), the whole work runs within end_of_data().
class stepped_end {
 public:
  virtual ~stepped_end() = default;
  // Started and not finished.
  virtual bool ending() const noexcept = 0;
  // One step: about runtime::pace_budget records' worth of work.
  virtual void continue_end() = 0;
  // A task steps it (task_builder::add_stepped_end).
  void step_by_task() noexcept { by_task_ = true; }

 protected:
  // At the end of end_of_data(): unless a task steps it, all of the work now.
  void end_unless_stepped() {
    if (by_task_) return;
    while (ending()) continue_end();
  }

 private:
  bool by_task_ = false;
};

// Owns a chain's parts; anything a chain builder makes goes here.
class chain_part {
 public:
  virtual ~chain_part() = default;
};

}  // namespace sluice::dataflow
