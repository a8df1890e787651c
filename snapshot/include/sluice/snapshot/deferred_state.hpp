#pragma once
// deferred_state: the part of an operator's state a snapshot writes after the task has gone on
// (docs/state.md). The synchronous part of the snapshot, on the task's executor at its barrier, is
// O(1) in the state's size: it freezes the state (a keyed state table marks an epoch) and hands this
// object over. The task's checkpoint then asks it for slices, each a bounded amount of work, between
// which the executor runs its other coroutines (the task's own records among them); the bytes of
// every slice follow the operator's synchronous bytes in its section of the state file.
//
// The object belongs to one checkpoint and is used on the task's executor only. Destroying it
// before it is done (the checkpoint was aborted) leaves the operator's state as it is.

#include <sluice/snapshot/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::snapshot {

class deferred_state {
 public:
  virtual ~deferred_state() = default;
  // Appends the next slice of the frozen state to `out` (about `budget` bytes, a little more for
  // one large entry); true once the whole state is out (then out holds its last bytes, if any).
  virtual bool next_slice(std::vector<std::byte>& out, std::size_t budget) = 0;
  // True when the slices ended before the state's end: a later snapshot of the same state took
  // over (or the state is gone). What was written is not the state: the checkpoint must not finish.
  virtual bool abandoned() const noexcept { return false; }
  // The checkpoint whose state this one is a delta on (its stream holds only what changed since),
  // or no_checkpoint when it is the whole state. Known at the freeze; recovery reads the base first.
  virtual checkpoint_id delta_base() const noexcept { return no_checkpoint; }
};

// An operator's deferred part (index as for operator_snapshot: its place in the chain).
struct deferred_operator_state {
  std::uint32_t operator_index = 0;
  std::unique_ptr<deferred_state> state;
};

}  // namespace sluice::snapshot
