#pragma once
// Number options and usage errors of the sluice tool. Every numeric option has a range; a value
// outside it is a usage error (exit 2) whose message names the option and the range.
//
// CLI11 2.1 reads numbers with strtoull/strtoll in base 0 and ignores ERANGE: "-1" in an unsigned
// option becomes 2^64-1, "99999999999999999999" becomes 2^64-1, and "010" becomes 8. So the
// validator here parses the value itself (decimal only), rejects those, and hands CLI11 the
// canonical digits to convert (a transform: CLI11 hands a check() a copy of the value).
//
//   add_number_option(command, "--lines", o.lines, "Lines of words", 0, 1'000'000'000);
//   add_required_number_option(command, "--window-ms", o.window_ms, "Window size", 1, 10'000'000'000);
//   if (auto done = parse_command_line(app, argc, argv)) return *done;

#include <CLI/CLI.hpp>

#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace sluice::apps {

// The exit code of every usage error (docs/cli.md, "Usage errors and numeric options"), never CLI11's own codes.
inline constexpr int exit_usage = 2;

// The ranges of the sample jobs' and generators' options: what one machine (tens of GiB of
// memory, a few hundred GB of disk) can run in hours, not days, without arithmetic overflow.
namespace limits {
// Lines of `corpus` (about 25 bytes each), rows of `join-input` (up to about 40): at most ~40 GB.
// Also --window-lines and --keys.
inline constexpr std::uint64_t max_lines = 1'000'000'000;
// --span-ms and --window-ms: about 116 days of event time.
inline constexpr std::uint64_t max_span_ms = 10'000'000'000;
static_assert(max_span_ms <= std::numeric_limits<std::uint64_t>::max() / max_lines,
              "join-input computes row * span_ms / rows");
// --checkpoint-interval-ms, --alignment-timeout-ms: an hour.
inline constexpr std::uint64_t max_interval_ms = 3'600'000;
// --slow-sink-us: 0.1 s per output line is already 10 lines a second.
inline constexpr std::uint64_t max_slow_sink_us = 100'000;
inline constexpr unsigned max_parallelism = 64;  // tasks per stage
inline constexpr unsigned max_executors = 64;    // threads, each with its own io_uring
// --network-memory: 1 TiB in MiB, more than any machine maps for channel buffers.
inline constexpr std::uint64_t max_network_memory_mib = 1'048'576;
// Nexmark: --events (nexmark-events writes ~130 bytes of JSON per event: at most ~1.3 TB, so
// hours of a job, not of one file) and --first-event; --rate in events per second of event time.
inline constexpr std::uint64_t max_nexmark_events = 10'000'000'000;
inline constexpr std::uint64_t max_nexmark_rate = 1'000'000'000;
}  // namespace limits

// Accepts a decimal whole number in [min, max]; the message of a rejection says why and the range.
CLI::Validator whole_number_in(std::uint64_t min, std::uint64_t max);
// Accepts a finite decimal number in [min, max].
CLI::Validator number_in(double min, double max);

template <class T>
concept number_option_target = std::unsigned_integral<T> || std::floating_point<T>;

template <number_option_target T>
CLI::Validator range_of(T min, T max) {
  if constexpr (std::unsigned_integral<T>) {
    return whole_number_in(min, max);
  } else {
    return number_in(static_cast<double>(min), static_cast<double>(max));
  }
}

// add_option(flags, target, help) that only accepts numbers in [min, max] (inclusive). The
// default (target's value) must lie in the range; --help shows it.
template <number_option_target T>
CLI::Option* add_number_option(CLI::App& command, const std::string& flags, T& target, const std::string& help,
                               std::type_identity_t<T> min, std::type_identity_t<T> max) {
  if (!(min <= target && target <= max)) {
    throw std::logic_error(flags + ": the default lies outside the option's range");
  }
  return command.add_option(flags, target, help)->capture_default_str()->transform(range_of<T>(min, max));
}

// The same for an option the user must give: it has no default.
template <number_option_target T>
CLI::Option* add_required_number_option(CLI::App& command, const std::string& flags, T& target,
                                        const std::string& help, std::type_identity_t<T> min,
                                        std::type_identity_t<T> max) {
  return command.add_option(flags, target, help)->required()->transform(range_of<T>(min, max));
}

// The same for an option the user may leave out: target keeps its value (a "not given" marker
// outside the range) unless the user gives one in the range.
template <number_option_target T>
CLI::Option* add_optional_number_option(CLI::App& command, const std::string& flags, T& target,
                                        const std::string& help, std::type_identity_t<T> min,
                                        std::type_identity_t<T> max) {
  return command.add_option(flags, target, help)->transform(range_of<T>(min, max));
}

// Parses the command line. Returns nullopt when the chosen command should run, else the process
// exit code: 0 after --help or --version (printed on stdout), exit_usage after a usage error
// (CLI11's message on stderr).
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv);

}  // namespace sluice::apps
