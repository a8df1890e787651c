#pragma once
// dataflow/: job graphs, operators, stream tasks, sources and sinks (see docs/design.md).
namespace sluice::dataflow {
// The dataflow layer's on-disk state format version (operator state inside checkpoints).
inline constexpr int state_format_version = 1;
}  // namespace sluice::dataflow
