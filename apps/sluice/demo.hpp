#pragma once
// `sluice demo`: a small real program of the runtime. See demo.cpp for what it does.

#include <CLI/CLI.hpp>

#include <cstdint>

namespace sluice::apps {

struct demo_options {
  unsigned connections = 32;
  unsigned message_bytes = 100;
  std::uint64_t duration_ms = 2000;
  unsigned executors = 2;
  bool quiet = false;
};

void add_demo_options(CLI::App& command, demo_options& options);
// Runs the demo and prints its summary; returns the process exit code. Throws on set-up failure.
int run_demo(const demo_options& options);

}  // namespace sluice::apps
