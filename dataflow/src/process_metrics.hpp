#pragma once
// The standard process_* metrics of Prometheus' client libraries (resident and virtual memory, CPU
// seconds, open and maximum file descriptors, start time), read from /proc/self: the series the
// usual alerts are written against. Reading is blocking file work: job_metrics runs it on the
// blocking-work pool (offload.hpp), never on an executor.

#include <sluice/io/prometheus_text.hpp>

#include <cstdint>
#include <optional>

namespace sluice::dataflow::detail {

struct process_sample {
  double cpu_seconds = 0;          // user + system
  std::uint64_t resident_bytes = 0;
  std::uint64_t virtual_bytes = 0;
  std::uint64_t open_fds = 0;
  std::optional<std::uint64_t> max_fds;  // RLIMIT_NOFILE's soft limit, absent when unlimited
  double start_time_seconds = 0;   // since the Unix epoch
};

// Blocking. nullopt when /proc/self cannot be read (then no process_* series are written).
std::optional<process_sample> read_process_sample();

void write_process(io::prometheus_text& out, const process_sample& p);

}  // namespace sluice::dataflow::detail
