#include "cli_options.hpp"

namespace sluice::apps {

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
