#pragma once
// `sluice checkpoints DIR [--json]`: what is in a checkpoint directory and which checkpoint a job
// started now would resume from. See checkpoints_cmd.cpp.

#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>

namespace sluice::apps {

struct checkpoints_options {
  std::string dir;
  bool json = false;
  std::size_t recent = 20;  // of the history: the newest checkpoints and starts shown
};

void add_checkpoints_options(CLI::App& command, checkpoints_options& options);
// Lists and validates the checkpoints, prints them; returns the process exit code (0 listed,
// 1 DIR could not be listed, 2 DIR missing or not a directory).
int run_checkpoints(const checkpoints_options& options);

}  // namespace sluice::apps
