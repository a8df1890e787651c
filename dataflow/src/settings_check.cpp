// See settings_check.hpp.

#include "settings_check.hpp"

#include "job_metrics.hpp"

#include <sluice/buffers/segment.hpp>

#include <fmt/core.h>

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
  if (settings.min_pause && settings.min_pause->count() < 0) {
    throw std::invalid_argument(fmt::format("job settings: min_pause {} ms must not be negative", settings.min_pause->count()));
  }
  if (!settings.metrics_address.empty()) {
    if (io::result<io::address> at = parse_metrics_address(settings.metrics_address); !at) {
      throw std::invalid_argument("job settings: " + at.error().message());
    }
  }
  if (settings.retained_checkpoints < 1) {
    throw std::invalid_argument("job settings: retained_checkpoints must be at least 1 (the newest one is what a restart "
                                "resumes from)");
  }
}

}  // namespace sluice::dataflow::detail
