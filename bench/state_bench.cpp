// state: keyed state at a service's scale (docs/state.md). For each key count of --keys, the
// word-count job over a corpus of ids of that many distinct values (--lines lines, by default as
// many as keys and at least a million, about 6.5 words a line), with unaligned checkpoints every --interval-ms:
// - throughput beside a one-thread std::unordered_map count of the same file in the same run
//   (median of --runs, alternating which goes first), as a ratio;
// - per checkpoint, from the job's history (docs/operations.md): the end-to-end duration (median
//   and longest), the longest synchronous part of any task's snapshot (sync: the executor's stall
//   for the snapshot) and the bytes the checkpoint wrote (operator and channel state, median: a
//   delta writes what changed since its base);
// - per checkpoint the run left on disk (retention keeps the newest 3 and what they require), the
//   full state: the bytes a recovery from it reads, its chains' base files included
//   (checkpoint_info::state_bytes, as `sluice checkpoints` shows it), median;
// - the job resumed from its last checkpoint (the finished job's final one, maybe a delta on a
//   chain): restore time, from the run's start to every task restored (median of --runs), and the
//   full state of that checkpoint;
// - resident memory per key, of the job and of the baseline: each run --runs times more in a forked
//   child (resident.hpp), the resident memory it added at its peak less what the same run adds over
//   as many lines of 100 distinct ids (an empty state: the same words and lines, few keys),
//   divided by the distinct keys (median of the runs).

#include "bench.hpp"
#include "resident.hpp"
#include "wordcount_runs.hpp"

#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_history.hpp>
#include <sluice/snapshot/checkpoint_report.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

namespace sluice::bench {
namespace {

namespace df = sluice::dataflow;
namespace ss = sluice::snapshot;

std::vector<std::uint64_t> parse_keys(const std::string& list) {
  std::vector<std::uint64_t> keys;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    std::size_t used = 0;
    std::uint64_t n = 0;
    try {
      n = std::stoull(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || n == 0) {
      throw std::invalid_argument("--keys: '" + item + "' is not a positive number (a list such as 100,100000,1000000)");
    }
    keys.push_back(n);
    at = comma + 1;
  }
  return keys;
}

// What one size's runs measured.
struct size_figures {
  std::vector<double> duration_ms;
  std::vector<double> sync_us;
  std::vector<double> written_bytes;  // per completed checkpoint (history)
  std::vector<double> state_bytes;    // per checkpoint kept on disk: the full state a recovery reads
  std::vector<double> restore_state_bytes;  // the full state of the checkpoint the resumed run read
  std::vector<double> restore_ms;
  double bytes_per_key = 0;           // resident memory per key: the job's
  double baseline_bytes_per_key = 0;  //                           the baseline's
};

runtime::task<io::result<std::vector<ss::checkpoint_info>>> list_checkpoints(std::string dir) {
  ss::checkpoint_storage storage(std::move(dir));
  co_return co_await storage.list();
}

// The full state of every valid checkpoint in `dir` into `f`; that of the resume point too.
void read_full_states(const std::string& dir, size_figures& f) {
  auto listed = runtime::sync_wait(list_checkpoints(dir));
  if (!listed) throw std::runtime_error("state bench: " + listed.error().message());
  const ss::checkpoint_id resume = ss::resume_point(*listed);
  for (const auto& info : *listed) {
    if (!info.valid || !info.state_bytes) continue;
    f.state_bytes.push_back(static_cast<double>(*info.state_bytes));
    if (info.id == resume) f.restore_state_bytes.push_back(static_cast<double>(*info.state_bytes));
  }
}

double ms(std::chrono::nanoseconds d) { return std::chrono::duration<double, std::milli>(d).count(); }

class state_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "state"; }
  std::string_view description() const noexcept override {
    return "keyed state at 100 to millions of keys: throughput vs a one-thread count, checkpoint duration, sync "
           "stall, bytes each checkpoint wrote and its full state, restore time, resident memory per key";
  }
  std::vector<option> options() override {
    return {{"--keys", "distinct keys, a comma-separated list (each size is measured in turn)", &keys_},
            {"--lines", "corpus lines; 0: as many as keys, at least 1,000,000", &lines_},
            {"--parallelism", "tasks per stage", &parallelism_},
            {"--interval-ms", "checkpoint interval (unaligned)", &interval_ms_}};
  }

  void run(const common_options& common, const reporter& out) override {
    const std::vector<std::uint64_t> sizes = parse_keys(keys_);
    const std::string dir = fmt::format("/tmp/sluice-bench-state-{}", ::getpid());
    std::filesystem::create_directories(dir);
    for (const std::uint64_t keys : sizes) measure(common, out, dir, keys);
    std::filesystem::remove_all(dir);
  }

 private:
  // The history of the job's last run (since its last start event): its checkpoints, then the
  // start's restore time into `f` (when it resumed).
  static void read_history(const std::string& dir, size_figures& f, bool checkpoints) {
    io::result<ss::history_contents> h = ss::read_history_blocking(dir + "/chk");
    if (!h) throw std::runtime_error("state bench: " + h.error().message());
    std::size_t last_start = 0;
    for (std::size_t i = 0; i < h->events.size(); ++i) {
      if (std::holds_alternative<ss::history_start>(h->events[i])) last_start = i;
    }
    for (std::size_t i = last_start; i < h->events.size(); ++i) {
      if (const auto* s = std::get_if<ss::history_start>(&h->events[i]); s != nullptr && s->resumed_from) {
        f.restore_ms.push_back(ms(s->restore_duration));
      }
      const auto* c = std::get_if<ss::history_checkpoint>(&h->events[i]);
      if (!checkpoints || c == nullptr || !c->completed) continue;
      f.duration_ms.push_back(ms(c->duration));
      f.sync_us.push_back(ms(c->max_sync_duration) * 1000.0);
      f.written_bytes.push_back(static_cast<double>(c->operator_state_bytes + c->channel_state_bytes));
    }
  }

  void measure(const common_options& common, const reporter& out, const std::string& dir, std::uint64_t keys) const {
    const std::string input = dir + "/corpus.txt";
    const std::uint64_t lines = lines_ != 0 ? lines_ : std::max<std::uint64_t>(keys, 1'000'000);
    auto written = runtime::sync_wait(df::write_corpus(input, lines, 42, keys));
    if (!written) throw std::runtime_error(written.error().message());
    double words = 0;
    std::unordered_set<std::string> seen;
    {
      std::ifstream in(input);
      std::string line;
      while (std::getline(in, line)) {
        df::for_each_word(line, [&](std::string_view w) {
          seen.emplace(w);
          ++words;
        });
      }
    }
    const std::size_t distinct = seen.size();
    seen = {};
    out.note(fmt::format("state: {} distinct keys ({} lines, {} words)", distinct, lines, words));
    size_figures f;
    auto r = measure_paired(
        common.runs,
        [&] {
          const auto interval = std::chrono::milliseconds(interval_ms_);
          const double s = run_wordcount_job("state", dir, input, parallelism_, interval, true).seconds;
          read_history(dir, f, true);
          read_full_states(dir + "/chk", f);
          // Resumed from the final checkpoint: the restore of the whole table.
          if (!run_wordcount_job("state", dir, input, parallelism_, interval, false).result.resumed_from) {
            throw std::runtime_error("state bench: the second run did not resume");
          }
          read_history(dir, f, false);
          return words / s;
        },
        [&] { return words / one_thread_count_seconds(input); });
    measure_memory(dir, input, lines, distinct, common.runs, f);
    report(common, out, distinct, r, f);
  }

  // Resident memory per key of the job and the baseline (see the top of the file), into `f`.
  void measure_memory(const std::string& dir, const std::string& input, std::uint64_t lines, std::size_t distinct,
                      unsigned runs, size_figures& f) const {
    constexpr std::uint64_t empty_keys = 100;  // ids of the same shape as the measured ones, a state of ~0 bytes
    const std::string empty = dir + "/empty-state.txt";
    auto written = runtime::sync_wait(df::write_corpus(empty, lines, 42, empty_keys));
    if (!written) throw std::runtime_error(written.error().message());
    const auto interval = std::chrono::milliseconds(interval_ms_);
    const auto job = [&](const std::string& corpus) {
      return static_cast<double>(peak_resident_growth_bytes(
          [&] { run_wordcount_job("state", dir + "/memory", corpus, parallelism_, interval, true); }));
    };
    const auto baseline = [&](const std::string& corpus) {
      return static_cast<double>(peak_resident_growth_bytes([&] { one_thread_count_seconds(corpus); }));
    };
    const auto per_key = [&](double full, double none) { return std::max(full - none, 0.0) / static_cast<double>(distinct); };
    // The peak catches what is in flight at that moment too (output, checkpoint buffers): a median.
    std::vector<double> jobs;
    std::vector<double> baselines;
    for (unsigned i = 0; i < runs; ++i) {
      jobs.push_back(per_key(job(input), job(empty)));
      baselines.push_back(per_key(baseline(input), baseline(empty)));
    }
    f.bytes_per_key = median(jobs);
    f.baseline_bytes_per_key = median(baselines);
    std::filesystem::remove_all(dir + "/memory");
    std::filesystem::remove(empty);
  }

  void report(const common_options& common, const reporter& out, std::size_t distinct, const paired_result& r,
              const size_figures& f) const {
    const auto longest = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
    const double memory_ratio = f.baseline_bytes_per_key > 0 ? f.bytes_per_key / f.baseline_bytes_per_key : 0.0;
    out.result(name(),
               fmt::format("state, {} keys: {}/s words  baseline (one thread, unordered_map) {}/s  ratio {:.2f}  |  "
                           "{} checkpoints: {:.0f} ms median, {:.0f} ms longest, sync longest {:.0f} us, wrote {} "
                           "median  |  full state {} median of the {} kept  |  restore {:.0f} ms of a {} full state  "
                           "|  resident {:.0f} B per key, baseline {:.0f} B, ratio {:.2f}  (parallelism {}, every {} ms)",
                           distinct, human_rate(r.figure), human_rate(r.baseline), r.figure / r.baseline,
                           f.duration_ms.size(), median(f.duration_ms), longest(f.duration_ms), longest(f.sync_us),
                           human_bytes(median(f.written_bytes)), human_bytes(median(f.state_bytes)),
                           f.state_bytes.size(), median(f.restore_ms), human_bytes(median(f.restore_state_bytes)),
                           f.bytes_per_key, f.baseline_bytes_per_key, memory_ratio, parallelism_, interval_ms_),
               {{"keys", std::uint64_t{distinct}},
                {"words_per_s", r.figure},
                {"baseline_words_per_s", r.baseline},
                {"ratio", r.figure / r.baseline},
                {"checkpoints", std::uint64_t{f.duration_ms.size()}},
                {"checkpoint_median_ms", median(f.duration_ms)},
                {"checkpoint_max_ms", longest(f.duration_ms)},
                {"sync_max_us", longest(f.sync_us)},
                {"written_bytes", median(f.written_bytes)},
                {"state_bytes", median(f.state_bytes)},
                {"state_checkpoints", std::uint64_t{f.state_bytes.size()}},
                {"restore_ms", median(f.restore_ms)},
                {"restore_state_bytes", median(f.restore_state_bytes)},
                {"bytes_per_key", f.bytes_per_key},
                {"baseline_bytes_per_key", f.baseline_bytes_per_key},
                {"bytes_per_key_ratio", memory_ratio},
                {"parallelism", std::uint64_t{parallelism_}},
                {"interval_ms", interval_ms_},
                {"runs", std::uint64_t{common.runs}}});
  }

  std::string keys_ = "100,100000,1000000";
  std::uint64_t lines_ = 0;
  unsigned parallelism_ = 2;
  std::uint64_t interval_ms_ = 200;
};

registration<state_bench> reg;

}  // namespace
}  // namespace sluice::bench
