#pragma once
// settings_check: what run_job checks before any executor starts: the settings' ranges, and the
// network memory the job's plan needs against job_settings::network_memory_limit_bytes (the
// formula is job_plan.hpp's).

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_runner.hpp>

#include <cstddef>

namespace sluice::dataflow::detail {

// Throws std::invalid_argument naming the first setting out of range.
void check_settings(const job_settings& settings);

// Throws std::invalid_argument with the numbers (executors x segments x segment size, the busiest
// executor's tasks and buffers) when `worker`'s network memory would exceed the limit.
void check_network_memory(const job_plan& plan, const job_settings& settings, unsigned worker = 0);

}  // namespace sluice::dataflow::detail
