#include "cli_options.hpp"

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>

namespace sluice::apps {

namespace {

// Why `input` is not a number in the range, from the first thing wrong with it.
std::string rejection(std::string_view input, std::string_view why, const std::string& expected) {
  return fmt::format("{} {}: expected {}", input.empty() ? "an empty value" : fmt::format("'{}'", input), why,
                     expected);
}

bool looks_negative(std::string_view input) { return !input.empty() && input.front() == '-'; }

}  // namespace

CLI::Validator whole_number_in(std::uint64_t min, std::uint64_t max) {
  const std::string expected = fmt::format("a whole number in [{}, {}]", min, max);
  return CLI::Validator(
      [min, max, expected](std::string& input) -> std::string {
        std::uint64_t value = 0;
        const char* const end = input.data() + input.size();
        const auto [stop, ec] = std::from_chars(input.data(), end, value);
        if (looks_negative(input)) return rejection(input, "is negative", expected);
        if (ec == std::errc::result_out_of_range) return rejection(input, "is out of range", expected);
        if (input.empty() || ec != std::errc() || stop != end) {
          return rejection(input, "is not a whole number", expected);
        }
        if (value < min || value > max) return rejection(input, "is out of range", expected);
        input = std::to_string(value);  // CLI11 converts in base 0: "010" would be 8
        return {};
      },
      fmt::format("in [{}, {}]", min, max));
}

CLI::Validator number_in(double min, double max) {
  const std::string expected = fmt::format("a number in [{}, {}]", min, max);
  return CLI::Validator(
      [min, max, expected](std::string& input) -> std::string {
        double value = 0;
        const char* const end = input.data() + input.size();
        const auto [stop, ec] = std::from_chars(input.data(), end, value);
        if (input.empty() || ec == std::errc::invalid_argument || stop != end) {
          return rejection(input, "is not a number", expected);
        }
        if (ec == std::errc::result_out_of_range || !std::isfinite(value) || value < min || value > max) {
          return rejection(input, looks_negative(input) && min >= 0 ? "is negative" : "is out of range", expected);
        }
        input = fmt::format("{}", value);  // the shortest text that reads back as the same double
        return {};
      },
      fmt::format("in [{}, {}]", min, max));
}

std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    // app.exit prints the help, the version, or the error with a hint; its codes (105, 106,
    // 109, ...) are CLI11's, not ours.
    return app.exit(e) == static_cast<int>(CLI::ExitCodes::Success) ? 0 : exit_usage;
  }
}

}  // namespace sluice::apps
