#pragma once
// job_budget: what run_job checks and sizes before any executor starts: the settings' ranges, and
// the network memory each executor's segment pool gets (docs/design.md "Buffers and credit").

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_runner.hpp>

#include <cstddef>

namespace sluice::dataflow::detail {

// Throws std::invalid_argument naming the first setting out of range.
void check_settings(const job_settings& settings);

// Segments of one executor's pool. Every executor gets the share of the most demanding one: each
// task may hold its output queue, its priority events, its exclusive buffers (2 per input channel)
// and the floating ones, for the widest stage or exchange of the job.
std::size_t segments_per_executor(const job_builder& job, const job_settings& settings);

}  // namespace sluice::dataflow::detail
