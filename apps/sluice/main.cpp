// Placeholder for the sluice command-line tool, so the build, install and
// demo script work end to end. The apps authors replace this file.

#include <sluice/runtime/version.hpp>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <string>

int main(int argc, char** argv) {
  CLI::App app{"sluice: streaming jobs on io_uring coroutines"};
  app.set_version_flag("--version", std::string(sluice::runtime::version()));

  CLI::App* bench = app.add_subcommand("bench", "Run the benchmarks");
  bench->allow_extras();
  CLI::App* demo = app.add_subcommand("demo", "Run the demo job");
  demo->allow_extras();

  CLI11_PARSE(app, argc, argv);

  if (bench->parsed()) {
    fmt::print("no benchmarks yet\n");
    return 0;
  }
  if (demo->parsed()) {
    fmt::print(stderr, "demo: not implemented yet\n");
    return 1;
  }
  fmt::print("{}", app.help());
  return 0;
}
