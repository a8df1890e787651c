#include "nexmark_cmd.hpp"
#include "cli_options.hpp"

#include <sluice/runtime/cpus.hpp>
#include <sluice/dataflow/generator.hpp>
#include <sluice/nexmark/queries.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace sluice::apps {

namespace {
// The process's peak resident memory so far (the summary's, printed after the job ended).
double peak_rss_mib() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
}
}  // namespace

nexmark::generator_config nexmark_generator_cli::config() const {
  nexmark::generator_config c;
  c.events_per_second = rate;
  c.base_time_ms = static_cast<std::int64_t>(base_time_ms);
  return c;
}

void add_nexmark_generator_options(CLI::App& command, nexmark_generator_cli& o) {
  add_number_option(command, "--events", o.events, "Events to generate (event numbers first-event ...)", 0,
                    limits::max_nexmark_events);
  add_number_option(command, "--first-event", o.first_event, "Number of the first event", 0,
                    limits::max_nexmark_events);
  add_number_option(command, "--rate", o.rate,
                    "Events per second of event time: event n happens at base-time + n*1000/rate ms "
                    "(Beam's firstEventRate; not a throttle)",
                    1, limits::max_nexmark_rate);
  add_number_option(command, "--base-time-ms", o.base_time_ms, "Event time of event 0, epoch ms", 0,
                    4'102'444'800'000);  // 2100-01-01
}

void add_nexmark_events_options(CLI::App& command, nexmark_events_cli& o) {
  add_nexmark_generator_options(command, o.generator);
  command.add_option("--output", o.output, "File to write: one JSON object per line")->required();
}

int run_nexmark_events(const nexmark_events_cli& o) {
  const nexmark::generator_config config = o.generator.config();
  const std::uint64_t first = o.generator.first_event;
  std::string line;
  io::result<std::uint64_t> written =
      runtime::sync_wait(dataflow::write_generated_lines(o.output, o.generator.events, [&](std::uint64_t i) {
        line = nexmark::to_json(nexmark::generate_event(config, first + i));
        return std::string_view(line);
      }));
  if (!written) {
    fmt::print(stderr, "sluice nexmark-events: {}\n", written.error().message());
    return 1;
  }
  fmt::print(stderr, "sluice nexmark-events: events {} to {}, {} bytes in {}\n", first,
             first + o.generator.events, written.value(), o.output);
  return 0;
}

void add_nexmark_options(CLI::App& command, nexmark_cli& o) {
  std::vector<std::string> names;
  std::string list;
  for (auto q : nexmark::query_names()) {
    names.emplace_back(q);
    list += (list.empty() ? "" : ", ") + std::string(q);
  }
  command.add_option("--query", o.query, "The query: " + list)->capture_default_str()->check(CLI::IsMember(names));
  add_nexmark_generator_options(command, o.generator);
  command.add_option("--output", o.output,
                     "Directory for the rows (CSV lines, exactly once); without it the rows are only counted");
  command.add_flag("--json", o.json, "Print the figures as one JSON object on stdout");
  command.add_option("--state-ttl-ms", o.state_ttl_ms,
                     "q3: forget a seller's persons and auctions this many event-time ms after its last event "
                     "(bounded memory; 0: keep them for ever)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 62));
  add_job_options(command, o.job);
}

int run_nexmark(const nexmark_cli& o) {
  nexmark::query_spec spec;
  spec.query = o.query;
  spec.events = o.generator.events;
  spec.first_event = o.generator.first_event;
  spec.generator = o.generator.config();
  spec.parallelism = o.job.parallelism;
  spec.output = o.output;
  spec.state_ttl_ms = o.state_ttl_ms;
  // Nexmark's figure per core counts every core the job uses, the generator's included.
  const unsigned allowed = runtime::available_cpus();
  const unsigned cores = std::min(o.job.executors == 0 ? allowed : o.job.executors, allowed);
  return run_sample(
      "nexmark", o.job, [&spec](dataflow::job_builder& job) { nexmark::build_query(job, spec); },
      [&o, cores](const dataflow::job_result& r) -> std::string {
        const double seconds = std::chrono::duration<double>(r.final.elapsed).count();
        const double per_s = seconds > 0 ? static_cast<double>(r.final.source_records) / seconds : 0;
        if (o.json) {
          nlohmann::ordered_json j;
          j["query"] = o.query;
          j["events"] = r.final.source_records;
          j["rows"] = r.final.records_written;
          j["seconds"] = seconds;
          j["events_per_s"] = per_s;
          j["events_per_s_per_core"] = per_s / cores;
          j["cores"] = cores;
          j["peak_rss_mib"] = peak_rss_mib();
          j["exit_code"] = r.exit_code;
          fmt::print("{}\n", j.dump());
        }
        return fmt::format("\nsluice nexmark {}: {} events in {:.3f} s: {:.0f} events/s, {:.0f} events/s per core "
                           "({} cores); {} rows; peak resident {:.0f} MiB",
                           o.query, r.final.source_records, seconds, per_s, per_s / cores, cores,
                           r.final.records_written, peak_rss_mib());
      });
}

}  // namespace sluice::apps
