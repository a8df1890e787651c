// The sluice command-line tool.
//
//   sluice --version             the version, and the I/O backend this machine would use (and why)
//   sluice bench --list            the benchmarks and what they measure
//   sluice bench <name> [--json] [--runs N] [bench options]
//   sluice demo [options]          an echo server and clients on the runtime, with a summary
//   sluice wordcount --input F --output D --checkpoint-dir C [...]   the word-count job
//   sluice join --left F --right F --output D --checkpoint-dir C --window-ms W [...]   the window join
//     (--state-ttl-ms T instead of --window-ms: a regular join with a state TTL)
//   sluice corpus / sluice join-input   generate inputs for them
//   sluice nexmark-events --events N --output F   Nexmark's events as JSON lines
//   sluice checkpoints DIR [--json] the checkpoints under DIR, validated, and the resume point

#include "bench_ranges.hpp"
#include "checkpoints_cmd.hpp"
#include "cli_options.hpp"
#include "demo.hpp"
#include "jobs_cmd.hpp"
#include "nexmark_cmd.hpp"
#include "simulate_cmd.hpp"

#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/memory_limit.hpp>
#include <sluice/runtime/version.hpp>

// The benchmark library is optional (SLUICE_BUILD_BENCH); its include directory comes with it.
#if __has_include(<bench.hpp>)
#include <bench.hpp>
#define SLUICE_HAVE_BENCH 1
#else
#define SLUICE_HAVE_BENCH 0
#endif

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace {

#if SLUICE_HAVE_BENCH
struct bench_command {
  sluice::bench::benchmark* bench;
  CLI::App* command;
};

// A number option gets its range from bench_ranges.cpp; one missing there still takes no negative
// or overflowing number.
void add_bench_option(CLI::App& command, std::string_view bench, const sluice::bench::option& o) {
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, bool>) {
          command.add_flag(o.flags, *target, o.help);
        } else if constexpr (std::is_same_v<T, std::string>) {
          command.add_option(o.flags, *target, o.help)->capture_default_str();
        } else {
          const auto range = sluice::apps::bench_option_range(bench, o.flags);
          const T min = range ? static_cast<T>(range->min) : T{0};
          const T max = range ? static_cast<T>(range->max) : std::numeric_limits<T>::max();
          sluice::apps::add_number_option(command, o.flags, *target, o.help, min, max);
        }
      },
      o.target);
}

void print_bench_list() {
  fmt::print("benchmarks (run one with `sluice bench <name>`, options with `sluice bench <name> --help`):\n");
  for (auto* b : sluice::bench::registered()) fmt::print("  {:<8} {}\n", b->name(), b->description());
}

// "sluice bench checkpoint --runs 5": what a chart prints under itself.
std::string command_line(int argc, char** argv) {
  std::string text = "sluice";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--plot") {  // the file name is not part of what was measured
      ++i;
      continue;
    }
    if (arg.starts_with("--plot=")) continue;
    text += ' ';
    text += arg;
  }
  return text;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  sluice::runtime::exit_on_unhandled_out_of_memory();
  // Named, so that usage lines say "sluice", not the path it was started by.
  CLI::App app{"sluice: streaming jobs on io_uring coroutines", "sluice"};
  app.set_version_flag("--version", [] {
    std::string text(sluice::runtime::version());
    try {
      const sluice::runtime::backend_choice choice = sluice::runtime::choose_backend();
      text += fmt::format("\nI/O backend: {} ({})", choice.name, choice.reason);
    } catch (const std::exception& e) {
      text += fmt::format("\nI/O backend: none ({})", e.what());
    }
    return text;
  });
  app.require_subcommand(0, 1);

  // --- bench ---
  CLI::App* bench = app.add_subcommand("bench", "Run a benchmark: a figure beside a baseline measured in the same run");
  bool list = false;
  bench->add_flag("--list", list, "List the benchmarks");
  bench->require_subcommand(0, 1);
#if SLUICE_HAVE_BENCH
  sluice::bench::common_options common;
  std::vector<bench_command> bench_commands;
  for (auto* b : sluice::bench::registered()) {
    CLI::App* command = bench->add_subcommand(std::string(b->name()), std::string(b->description()));
    sluice::apps::add_number_option(*command, "--runs", common.runs,
                                    "Measurements of figure and baseline each; the median is reported",
                                    static_cast<unsigned>(sluice::apps::bench_runs_range.min),
                                    static_cast<unsigned>(sluice::apps::bench_runs_range.max));
    command->add_flag("--json", common.json, "Print one JSON object per result");
    if (b->plots()) {
      command->add_option("--plot", common.plot, "Also draw the results into this PNG file (with gnuplot)");
    }
    for (const auto& o : b->options()) add_bench_option(*command, b->name(), o);
    bench_commands.push_back({b, command});
  }
#endif

  // --- demo ---
  CLI::App* demo = app.add_subcommand("demo", "Run an echo server and clients on the runtime, then print what they did");
  sluice::apps::demo_options demo_opts;
  sluice::apps::add_demo_options(*demo, demo_opts);

  // --- sample jobs ---
  CLI::App* wordcount = app.add_subcommand(
      "wordcount", "Count the words of a text file, exactly once across crashes (resumes from its checkpoints)");
  sluice::apps::wordcount_cli wordcount_opts;
  sluice::apps::add_wordcount_options(*wordcount, wordcount_opts);
  // --- checkpoints ---
  CLI::App* checkpoints =
      app.add_subcommand("checkpoints", "List the checkpoints under a directory, validated, and the resume point");
  sluice::apps::checkpoints_options checkpoints_opts;
  sluice::apps::add_checkpoints_options(*checkpoints, checkpoints_opts);

  CLI::App* join = app.add_subcommand(
      "join", "Join two timestamped CSV files per key in tumbling windows, exactly once across crashes");
  sluice::apps::join_cli join_opts;
  sluice::apps::add_join_options(*join, join_opts);
  CLI::App* join_input = app.add_subcommand("join-input", "Write a seeded CSV input for `sluice join`");
  sluice::apps::join_input_cli join_input_opts;
  sluice::apps::add_join_input_options(*join_input, join_input_opts);

  CLI::App* simulate = app.add_subcommand(
      "simulate", "Run sample jobs on the deterministic simulator, seed after seed, with faults and crashes");
  sluice::apps::simulate_options simulate_opts;
  sluice::apps::add_simulate_options(*simulate, simulate_opts);

  CLI::App* corpus = app.add_subcommand("corpus", "Write a seeded corpus of words, for the sample jobs");
  sluice::apps::corpus_cli corpus_opts;
  sluice::apps::add_corpus_options(*corpus, corpus_opts);

  CLI::App* nexmark_events = app.add_subcommand(
      "nexmark-events", "Write Nexmark's generated events (Beam's generator) as JSON lines, to check queries with");
  sluice::apps::nexmark_events_cli nexmark_events_opts;
  sluice::apps::add_nexmark_events_options(*nexmark_events, nexmark_events_opts);

  CLI::App* nexmark = app.add_subcommand(
      "nexmark", "Run a Nexmark query over generated events, exactly once across crashes; events/s per core");
  sluice::apps::nexmark_cli nexmark_opts;
  sluice::apps::add_nexmark_options(*nexmark, nexmark_opts);

  // Every usage error of every command ends here: CLI11's message, exit 2.
  if (auto done = sluice::apps::parse_command_line(app, argc, argv)) return *done;

  if (corpus->parsed()) return sluice::apps::run_corpus(corpus_opts);
  if (nexmark_events->parsed()) return sluice::apps::run_nexmark_events(nexmark_events_opts);
  if (nexmark->parsed()) return sluice::apps::run_nexmark(nexmark_opts);
  if (simulate->parsed()) {
    try {
      return sluice::apps::run_simulate(simulate_opts);
    } catch (const std::exception& e) {
      fmt::print(stderr, "sluice simulate: {}\n", e.what());
      return 1;
    }
  }

  if (wordcount->parsed()) return sluice::apps::run_wordcount(wordcount_opts);
  if (join->parsed()) return sluice::apps::run_join(join_opts);
  if (join_input->parsed()) return sluice::apps::run_join_input(join_input_opts);

  if (bench->parsed()) {
#if SLUICE_HAVE_BENCH
    for (auto& bc : bench_commands) {
      if (!bc.command->parsed()) continue;
      try {
        std::optional<sluice::bench::chart> chart;
        if (!common.plot.empty()) {
          sluice::bench::check_plot_target(common.plot);
          chart.emplace();
          chart->set_footnote(command_line(argc, argv));
        }
        bc.bench->run(common, sluice::bench::reporter{common.json, chart ? &*chart : nullptr});
        if (chart) {
          chart->render(common.plot);
          fmt::print(common.json ? stderr : stdout, "plot written to {}\n", common.plot);
        }
        return 0;
      } catch (const std::invalid_argument& e) {  // the benchmarks' own checks of their options
        fmt::print(stderr, "sluice bench {}: {}\n", bc.bench->name(), e.what());
        return sluice::apps::exit_usage;
      } catch (const std::exception& e) {
        fmt::print(stderr, "sluice bench {}: {}\n", bc.bench->name(), e.what());
        return 1;
      }
    }
    print_bench_list();
    return 0;
#else
    fmt::print(stderr, "sluice bench: this build has no benchmarks (configure with -DSLUICE_BUILD_BENCH=ON)\n");
    return 1;
#endif
  }
  if (demo->parsed()) {
    try {
      return sluice::apps::run_demo(demo_opts);
    } catch (const std::exception& e) {
      fmt::print(stderr, "sluice demo: {}\n", e.what());
      return 1;
    }
  }
  if (checkpoints->parsed()) {
    try {
      return sluice::apps::run_checkpoints(checkpoints_opts);
    } catch (const std::exception& e) {
      fmt::print(stderr, "sluice checkpoints: {}\n", e.what());
      return 1;
    }
  }
  // No subcommand: usage, on stderr, and the usage exit code (a script that forgot the command fails).
  fmt::print(stderr, "{}", app.help());
  return sluice::apps::exit_usage;
}
