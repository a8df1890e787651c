#pragma once
// settings_check: what run_job checks before any executor starts: the settings' ranges. (The network
// memory each executor's pool gets is the job plan's: job_plan.hpp.)

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_runner.hpp>

#include <cstddef>

namespace sluice::dataflow::detail {

// Throws std::invalid_argument naming the first setting out of range.
void check_settings(const job_settings& settings);

}  // namespace sluice::dataflow::detail
