#pragma once
// The range of every benchmark option. bench/ declares a benchmark's options without ranges; the
// tool adds each with its range from this table, so `sluice bench <name> --opt N` rejects a value
// that would run for days, fill the disk or overflow (a usage error, exit 2). An option missing
// here still rejects negative and overflowing numbers, and tests/apps fails until it is added.

#include <optional>
#include <string_view>

namespace sluice::apps {

// Inclusive. Whole-number options use whole bounds (all below 2^53, so a double holds them exactly).
struct number_range {
  double min;
  double max;
};

// The range of `flag` ("--ops") of benchmark `bench` ("nop"), if the table has it.
std::optional<number_range> bench_option_range(std::string_view bench, std::string_view flag);

// --runs of every benchmark: measurements of figure and baseline each.
inline constexpr number_range bench_runs_range{1, 100};

}  // namespace sluice::apps
