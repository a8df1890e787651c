// nexmark: events/s per core of each Nexmark query (nexmark/queries.hpp) over generated events,
// checkpoints on (unaligned, every 10 s), rows only counted (Nexmark's blackhole sink), beside
// Flink 1.13's published figure per core (nexmark/nexmark README: 8 task managers, RocksDB,
// exactly-once checkpoints every 3 minutes). Cores are every core the job uses, the generator's
// included: min(executors, the machine's cores).

#include "bench.hpp"

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/nexmark/queries.hpp>

#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::bench {
namespace {

namespace df = sluice::dataflow;

// Flink 1.13, events/s per core (nexmark/nexmark README).
const std::map<std::string, double>& flink_per_core() {
  static const std::map<std::string, double> figures = {
      {"q0", 155'000}, {"q1", 158'000}, {"q2", 175'000}, {"q3", 152'000},
      {"q4", 34'000},  {"q5", 22'000},  {"q7", 12'300},  {"q8", 146'000}};
  return figures;
}

class nexmark_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "nexmark"; }
  std::string_view description() const noexcept override {
    return "events/s per core of each Nexmark query, checkpoints on, vs Flink 1.13's published figure per core";
  }
  std::vector<option> options() override {
    return {{"--queries", "comma-separated queries (default: all this build has)", &queries_},
            {"--events", "events per query run", &events_},
            {"--parallelism", "tasks per stage (and executors)", &parallelism_}};
  }
  void run(const common_options& common, const reporter& out) override {
    const std::string dir = fmt::format("/tmp/sluice-bench-nexmark-{}", ::getpid());
    const unsigned cores = std::max(1u, std::min(parallelism_, std::max(1u, std::thread::hardware_concurrency())));
    for (const std::string& query : selected()) {
      std::vector<double> samples;
      for (unsigned i = 0; i < common.runs; ++i) samples.push_back(events_per_second(dir, query));
      const double per_s = median(samples);
      const double per_core = per_s / cores;
      const auto flink = flink_per_core().find(query);
      const double flink_figure = flink == flink_per_core().end() ? 0 : flink->second;
      const double ratio = flink_figure > 0 ? per_core / flink_figure : 0;
      out.result(name(),
                 fmt::format("nexmark {}: {}/s events, {}/s per core ({} cores)  Flink 1.13: {}/s per core  "
                             "ratio {:.2f}  ({} events, median of {})",
                             query, human_rate(per_s), human_rate(per_core), cores, human_rate(flink_figure), ratio,
                             events_, common.runs),
                 {{"query", query},
                  {"events", events_},
                  {"events_per_s", per_s},
                  {"events_per_s_per_core", per_core},
                  {"flink_per_core", flink_figure},
                  {"ratio", ratio},
                  {"cores", std::uint64_t{cores}},
                  {"runs", std::uint64_t{common.runs}}});
    }
    std::filesystem::remove_all(dir);
  }

 private:
  std::vector<std::string> selected() const {
    std::vector<std::string> names;
    if (queries_.empty()) {
      for (auto q : nexmark::query_names()) names.emplace_back(q);
      return names;
    }
    std::stringstream in(queries_);
    for (std::string q; std::getline(in, q, ',');) {
      const auto& known = nexmark::query_names();
      if (std::find(known.begin(), known.end(), q) == known.end()) {
        throw std::invalid_argument(fmt::format("--queries: no query '{}' in this build", q));
      }
      names.push_back(q);
    }
    return names;
  }

  double events_per_second(const std::string& dir, const std::string& query) const {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    df::job_builder job("nexmark-" + query);
    nexmark::query_spec spec;
    spec.query = query;
    spec.events = events_;
    spec.parallelism = parallelism_;
    nexmark::build_query(job, spec);
    df::job_settings settings;
    settings.checkpoint_dir = dir + "/chk";
    settings.mode = snapshot::checkpoint_mode::unaligned;
    settings.checkpoint_interval = std::chrono::seconds(10);
    settings.executors = parallelism_;
    settings.handle_signals = false;
    const auto start = bench_clock::now();
    const df::job_result r = df::run_job(job, settings);
    const double s = seconds_since(start);
    if (r.exit_code != 0) throw std::runtime_error("nexmark bench: " + query + " failed: " + r.message);
    return static_cast<double>(r.final.source_records) / s;
  }

  std::string queries_;
  std::uint64_t events_ = 5'000'000;
  unsigned parallelism_ = 2;
};

registration<nexmark_bench> reg;

}  // namespace
}  // namespace sluice::bench
