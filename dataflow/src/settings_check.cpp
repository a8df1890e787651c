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
  if (settings.network_memory_limit_bytes < settings.segment_bytes) {
    throw std::invalid_argument(fmt::format("job settings: network_memory_limit_bytes {} is below one segment ({} bytes)",
                                            settings.network_memory_limit_bytes, settings.segment_bytes));
  }
  if (settings.retained_checkpoints < 1) {
    throw std::invalid_argument("job settings: retained_checkpoints must be at least 1 (the newest one is what a restart "
                                "resumes from)");
  }
}

namespace {

std::string mib(std::size_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

}  // namespace

void check_network_memory(const job_plan& plan, const job_settings& settings, unsigned worker) {
  const memory_budget m = plan.budget(settings.segment_bytes, worker);
  if (m.total_bytes() <= settings.network_memory_limit_bytes) return;
  const task_buffers& b = m.busiest;
  throw std::invalid_argument(fmt::format(
      "the job needs {} of network memory, over the limit of {} (--network-memory, "
      "job_settings::network_memory_limit_bytes): {} executors x {} segments x {} KiB; the busiest executor ({}) "
      "runs {} tasks holding {} output + {} priority + {} exclusive (2 per input channel) + {} floating buffers, "
      "plus 16 spare. Lower --parallelism or --executors, or raise --network-memory to at least {}",
      mib(m.total_bytes()), mib(settings.network_memory_limit_bytes), m.executors, m.segments_per_executor,
      m.segment_bytes / 1024, m.busiest_executor, m.busiest_tasks, b.output, b.priority, b.exclusive, b.floating,
      mib(m.total_bytes())));
}

}  // namespace sluice::dataflow::detail
