// See job_budget.hpp.

#include "job_budget.hpp"

#include <sluice/buffers/segment.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

namespace sluice::dataflow::detail {

void check_settings(const job_settings& settings) {
  if (settings.checkpoint_dir.empty()) throw std::invalid_argument("job settings: a checkpoint directory is required");
  if (settings.executors == 0) throw std::invalid_argument("job settings: at least one executor");
  if (settings.max_record_bytes == 0 || settings.max_record_bytes > (std::size_t{1} << 30)) {
    throw std::invalid_argument(fmt::format("job settings: max_record_bytes {} is out of range (1 byte to 1 GiB)",
                                            settings.max_record_bytes));
  }
  if (settings.segment_bytes < 4096 || settings.segment_bytes > buffers::default_segment_bytes ||
      (settings.segment_bytes & (settings.segment_bytes - 1)) != 0) {
    throw std::invalid_argument(fmt::format("job settings: segment_bytes {} must be a power of two from 4 KiB to {} KiB",
                                            settings.segment_bytes, buffers::default_segment_bytes / 1024));
  }
  if (settings.checkpoint_timeout < std::chrono::milliseconds(1)) {
    throw std::invalid_argument(fmt::format("job settings: checkpoint_timeout {} ms must be at least 1 ms",
                                            settings.checkpoint_timeout.count()));
  }
  if (settings.transport != "local" && settings.transport != "tcp") {
    throw std::invalid_argument("job settings: transport must be local or tcp, not '" + settings.transport + "'");
  }
}

std::size_t segments_per_executor(const job_builder& job, const job_settings& settings) {
  std::size_t tasks = 0;
  std::size_t widest = 1;
  for (const stage_def& s : job.stages()) {
    tasks += s.parallelism;
    std::size_t inputs = 0;
    for (std::size_t up : s.upstreams) inputs += up < job.stages().size() ? job.stages()[up].parallelism : 0;
    widest = std::max({widest, s.parallelism, inputs});
  }
  const std::size_t per_task = (3 * widest + 8) + 4 + (2 * widest + settings.floating_buffers);
  return per_task * ((tasks + settings.executors - 1) / settings.executors) + 16;
}

}  // namespace sluice::dataflow::detail
