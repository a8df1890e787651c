#pragma once
// What a checkpoint stores of an operator (collector.hpp's stateful): its bytes, then the slices of
// its deferred part (a frozen state table), all of them, as the task's checkpoint writes them.

#include <sluice/dataflow/collector.hpp>

#include <cstddef>
#include <vector>

namespace sluice::test {

inline std::vector<std::byte> full_snapshot(dataflow::stateful& op, std::size_t slice_bytes = 64) {
  std::vector<std::byte> out = op.snapshot_state();
  if (auto rest = op.snapshot_rest(sluice::snapshot::no_checkpoint)) {
    while (!rest->next_slice(out, slice_bytes)) {
    }
  }
  return out;
}

}  // namespace sluice::test
