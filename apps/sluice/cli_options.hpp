#pragma once
// Usage errors of the sluice tool: every one, in every command, exits 2 with CLI11's message.
//
//   if (auto done = parse_command_line(app, argc, argv)) return *done;

#include <CLI/CLI.hpp>

#include <optional>

namespace sluice::apps {

// The exit code of every usage error (README: "2 for bad usage"), never CLI11's own codes.
inline constexpr int exit_usage = 2;

// Parses the command line. Returns nullopt when the chosen command should run, else the process
// exit code: 0 after --help or --version (printed on stdout), exit_usage after a usage error
// (CLI11's message on stderr).
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv);

}  // namespace sluice::apps
