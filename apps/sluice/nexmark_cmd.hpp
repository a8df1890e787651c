#pragma once
// `sluice nexmark-events`: Nexmark's generated events as JSON lines (nexmark/generator.hpp), so
// that anyone can check a query's rows with their own tools; `sluice nexmark`: one query
// (nexmark/queries.hpp) over the same events, as a job with the other sample jobs' options.

#include "jobs_cmd.hpp"

#include <sluice/nexmark/generator.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace sluice::apps {

// The generator's options, shared by nexmark-events and nexmark: the same values give the same events.
struct nexmark_generator_cli {
  std::uint64_t events = 100'000;
  std::uint64_t first_event = 0;
  std::uint64_t rate = 10'000;
  std::uint64_t base_time_ms = static_cast<std::uint64_t>(nexmark::generator_config{}.base_time_ms);

  nexmark::generator_config config() const;
};
void add_nexmark_generator_options(CLI::App& command, nexmark_generator_cli& o);

struct nexmark_events_cli {
  nexmark_generator_cli generator;
  std::string output;
};
void add_nexmark_events_options(CLI::App& command, nexmark_events_cli& o);
// Exit code: 0 written, 1 an I/O error (said on stderr).
int run_nexmark_events(const nexmark_events_cli& o);

struct nexmark_cli {
  nexmark_generator_cli generator;
  std::string query = "q0";
  std::string output;  // empty: rows are only counted
  bool json = false;
  std::uint64_t state_ttl_ms = 0;  // q3's join state TTL (event time); 0: none
  job_cli_options job;
};
void add_nexmark_options(CLI::App& command, nexmark_cli& o);
// Exit code as the other sample jobs (0 done, 1 failed, 2 bad usage or refused, 130 stopped).
int run_nexmark(const nexmark_cli& o);

}  // namespace sluice::apps
