#include "bench_ranges.hpp"

#include <array>

namespace sluice::apps {

namespace {

struct entry {
  std::string_view bench;
  std::string_view flag;
  number_range range;
};

constexpr double kib = 1024;
constexpr double mib = 1024 * kib;
constexpr double gib = 1024 * mib;

// Durations stay within minutes per measurement (each runs 2 x --runs times); sizes within what a
// machine with tens of GiB of memory and free disk holds; counts of rings' entries within the ring.
constexpr std::array table{
    entry{"cluster", "--lines", {1, 1e8}},
    entry{"cluster", "--workers", {2, 16}},  // processes on this host
    entry{"cluster", "--parallelism", {1, 64}},
    entry{"checkpoint", "--checkpoints", {1, 1000}},
    entry{"checkpoint", "--seconds", {0.1, 600}},
    entry{"checkpoint", "--sink-us", {0, 100'000}},
    entry{"checkpoint", "--interval-ms", {1, 60'000}},
    entry{"checkpoint", "--alignment-timeout-ms", {0, 60'000}},
    entry{"checkpoint", "--record-bytes", {1, mib}},
    entry{"checkpoint", "--unloaded-rate", {1, 1'000'000}},
    entry{"echo", "--connections", {1, 10'000}},
    entry{"echo", "--message-bytes", {1, mib}},
    entry{"echo", "--duration-ms", {1, 600'000}},
    entry{"kafka", "--records", {1, 1e8}},
    entry{"kafka", "--per-checkpoint", {1, 1e7}},  // one checkpoint's records are held in memory
    entry{"kafka", "--source-records", {1, 160'000}},  // the mock keeps ~5 MiB per partition, 4 partitions
    entry{"file", "--bytes", {1, 16 * gib}},
    entry{"file", "--chunk-bytes", {1, gib}},
    entry{"file", "--in-flight", {1, 256}},   // the raw-uring diagnostic's ring has 256 entries
    entry{"file", "--wait-batch", {1, 256}},
    entry{"network", "--channels", {1, 4096}},
    entry{"network", "--flush-ms", {0, 60'000}},
    entry{"network", "--records", {1, 1e9}},
    entry{"nats", "--records", {1, 1e8}},
    entry{"nats", "--per-checkpoint", {1, 1e7}},
    entry{"nop", "--ops", {1, 1e9}},
    entry{"nop", "--coroutines", {1, 65'536}},
    entry{"nop", "--batch", {1, 256}},        // the baseline's SQ size
    entry{"postgres", "--records", {1, 1e8}},
    entry{"postgres", "--per-checkpoint", {1, 1e7}},
    entry{"switch", "--duration-ms", {1, 600'000}},
    entry{"switch", "--fiber-iterations", {1, 1e9}},
    entry{"state", "--lines", {0, 1e8}},
    entry{"state", "--parallelism", {1, 64}},
    entry{"state", "--interval-ms", {1, 60'000}},
    entry{"wordcount", "--lines", {1, 1e8}},  // the generated corpus: ~4 GB
    entry{"wordcount", "--parallelism", {1, 64}},
    entry{"wordcount", "--distinct", {0, 1e9}},
    entry{"nexmark", "--events", {1, 1e10}},
    entry{"nexmark", "--parallelism", {1, 64}},
};

}  // namespace

std::optional<number_range> bench_option_range(std::string_view bench, std::string_view flag) {
  for (const entry& e : table) {
    if (e.bench == bench && e.flag == flag) return e.range;
  }
  return std::nullopt;
}

}  // namespace sluice::apps
