// wordcount: words per second through the word-count job (dataflow/samples.hpp) on a generated
// corpus, with checkpoints on (unaligned, every 100 ms) and off, beside a single-threaded word count
// in plain C++ (std::ifstream, std::unordered_map) over the same file in the same run.

#include "bench.hpp"
#include "wordcount_runs.hpp"

#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <fmt/core.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace sluice::bench {
namespace {

namespace df = sluice::dataflow;

std::uint64_t count_words(const std::string& path) {
  std::uint64_t words = 0;
  std::string line;
  std::ifstream in(path);
  while (std::getline(in, line)) df::for_each_word(line, [&](std::string_view) { ++words; });
  return words;
}

}  // namespace

double one_thread_count_seconds(const std::string& path) {
  const auto start = bench_clock::now();
  std::unordered_map<std::string, std::uint64_t> counts;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) df::for_each_word(line, [&](std::string_view w) { ++counts[std::string(w)]; });
  do_not_optimize(counts.size());
  return seconds_since(start);
}

wordcount_run run_wordcount_job(const std::string& bench, const std::string& dir, const std::string& input,
                                std::size_t parallelism, std::chrono::milliseconds interval, bool afresh) {
  if (afresh) {  // (a resumed run keeps the output its checkpoint belongs to)
    std::filesystem::remove_all(dir + "/out");
    std::filesystem::remove_all(dir + "/chk");
  }
  std::filesystem::create_directories(dir + "/out");
  df::job_builder job("wordcount");
  df::build_wordcount(job, {input, dir + "/out", parallelism, 0});
  df::job_settings settings;
  settings.checkpoint_dir = dir + "/chk";
  settings.mode = snapshot::checkpoint_mode::unaligned;
  settings.checkpoint_interval = interval.count() > 0 ? interval : std::chrono::milliseconds(86'400'000);
  settings.handle_signals = false;
  const auto start = bench_clock::now();
  wordcount_run run;
  run.result = df::run_job(job, settings);
  run.seconds = seconds_since(start);
  if (run.result.exit_code != 0) throw std::runtime_error(bench + " bench: the job failed: " + run.result.message);
  return run;
}

namespace {

class wordcount_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "wordcount"; }
  std::string_view description() const noexcept override {
    return "words/s through the word-count job, checkpoints on and off, vs a one-thread std::unordered_map count";
  }
  bool plots() const noexcept override { return true; }
  std::vector<option> options() override {
    return {{"--lines", "corpus lines", &lines_},
            {"--parallelism", "tasks per stage", &parallelism_},
            {"--distinct", "distinct words (ids); 0: text from a 100-word vocabulary", &distinct_}};
  }
  void run(const common_options& common, const reporter& out) override {
    const std::string dir = fmt::format("/tmp/sluice-bench-wordcount-{}", ::getpid());
    std::filesystem::create_directories(dir);
    const std::string input = dir + "/corpus.txt";
    auto written = runtime::sync_wait(df::write_corpus(input, lines_, 42, distinct_));
    if (!written) throw std::runtime_error(written.error().message());
    const double words = static_cast<double>(count_words(input));
    if (chart* c = out.chart()) {
      c->describe(fmt::format("word count: {} lines, {} words{}", lines_, words, distinct_label()), "million words per second",
                  chart_style::bars);
    }
    for (const bool checkpoints : {true, false}) {
      auto r = measure_paired(
          common.runs, [&] {
            const auto interval = std::chrono::milliseconds(checkpoints ? 100 : 0);
            return words / run_wordcount_job("wordcount", dir, input, parallelism_, interval, true).seconds;
          },
          [&] { return words / one_thread_count_seconds(input); });
      chart_paired(out, checkpoints ? "checkpoints on (unaligned, 100 ms)" : "checkpoints off",
                   fmt::format("sluice job, parallelism {}", parallelism_), "one thread, std::unordered_map", r, 1e-6,
                   1e-6);
      out.result(name(),
                 fmt::format("wordcount, checkpoints {}: {}/s words  baseline (one thread, unordered_map) {}/s  "
                             "ratio {:.2f}  ({} lines, {} words{}, parallelism {})",
                             checkpoints ? "on (unaligned, 100 ms)" : "off", human_rate(r.figure),
                             human_rate(r.baseline), r.figure / r.baseline, lines_, words, distinct_label(),
                             parallelism_),
                 {{"words_per_s", r.figure},
                  {"baseline_words_per_s", r.baseline},
                  {"ratio", r.figure / r.baseline},
                  {"checkpoints", checkpoints},
                  {"lines", lines_},
                  {"distinct", distinct_},
                  {"parallelism", std::uint64_t{parallelism_}},
                  {"runs", std::uint64_t{common.runs}}});
    }
    std::filesystem::remove_all(dir);
  }

 private:
  std::string distinct_label() const {
    return distinct_ == 0 ? std::string(", 100-word vocabulary") : fmt::format(", ids of {} distinct", distinct_);
  }

  std::uint64_t lines_ = 1'000'000;
  unsigned parallelism_ = 2;
  std::uint64_t distinct_ = 0;
};

registration<wordcount_bench> reg;

}  // namespace
}  // namespace sluice::bench
