#include "nexmark_cmd.hpp"
#include "cli_options.hpp"

#include <sluice/dataflow/generator.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <fmt/core.h>

namespace sluice::apps {

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

}  // namespace sluice::apps
