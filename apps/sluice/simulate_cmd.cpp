// `sluice simulate` (see simulate_cmd.hpp).

#include "simulate_cmd.hpp"

#include "cli_options.hpp"
#include "sim_seed.hpp"

#include <sluice/runtime/admission.hpp>
#include <sluice/runtime/plant.hpp>
#include <sluice/snapshot/checkpoint_report.hpp>

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>

namespace sluice::apps {

namespace {

using simulate::fault_class;
using simulate::job_kind;

// "A-B" (inclusive, A <= B) or "A"; each 0 to 2^64-1. Empty when it is neither, with why.
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_range(const std::string& text, std::string& why) {
  auto number = [&why](std::string_view s, std::uint64_t& v) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) why = fmt::format("'{}' is above the largest seed, {}", s, UINT64_MAX);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  const std::size_t dash = text.find('-');
  std::uint64_t a = 0, b = 0;
  if (dash == std::string::npos) {
    if (!number(text, a)) return std::nullopt;
    return std::pair(a, a);
  }
  if (!number(std::string_view(text).substr(0, dash), a) || !number(std::string_view(text).substr(dash + 1), b)) {
    return std::nullopt;
  }
  if (b < a) {
    why = fmt::format("the range ends at {}, before it starts", b);
    return std::nullopt;
  }
  return std::pair(a, b);
}

// The smallest ring every seed's job can run on: waits (recv, accept, connect) hold at most
// wait_capacity_for(N) places of a ring of N (runtime/admission.hpp), and a tcp channel needs two at
// once on an executor (its listener's accept stays in flight while it connects or receives). With
// one place for waits no tcp channel can ever connect.
constexpr std::uint64_t smallest_ring() {
  std::uint64_t n = 1;
  while (runtime::wait_capacity_for(n) < 2) ++n;
  return n;
}

using snapshot::json_string;

std::string reproduce(const simulate::scenario& s, const simulate_options& o) {
  std::string extra;
  if (o.ring != 0) extra += fmt::format(" --ring {}", o.ring);
  if (!o.stop.empty()) extra += " --stop " + o.stop;
  if (o.max_steps != simulate::default_step_limit) extra += fmt::format(" --max-steps {}", o.max_steps);
  if (o.max_idle_steps != simulate::default_idle_step_limit) {
    extra += fmt::format(" --max-idle-steps {}", o.max_idle_steps);
  }
  if (o.spin_limit_seconds != std::chrono::duration<double>(simulate::default_spin_limit).count()) {
    extra += fmt::format(" --spin-limit-seconds {:g}", o.spin_limit_seconds);
  }
  return fmt::format("sluice simulate --job {} --seeds {}-{} --faults {}{}{} --trace", simulate::to_string(s.job),
                     s.seed, s.seed, simulate::to_string(s.faults), s.plant.empty() ? "" : " --plant " + s.plant,
                     extra);
}

simulate::seed_options seed_options_for(const simulate_options& o, std::uint64_t seed) {
  simulate::seed_options so;
  so.step_limit = o.max_steps;
  so.idle_step_limit = o.max_idle_steps;
  so.spin_limit = std::chrono::milliseconds(static_cast<std::int64_t>(o.spin_limit_seconds * 1000));
  so.trace = o.trace;
  so.twice = o.twice_every != 0 && seed % o.twice_every == 0;
  return so;
}

struct totals {
  std::uint64_t count = 0, failures = 0, steps = 0, crashes = 0, restores = 0, attempts = 0, injected = 0;
  std::uint64_t stops = 0, stopped = 0, drains = 0, max_process_steps = 0, longest_idle_run = 0;
  double simulated = 0;
  void add(const simulate::seed_result& r) {
    ++count;
    if (r.failed) ++failures;
    steps += r.steps;
    simulated += r.simulated_seconds;
    crashes += r.crashes;
    restores += r.restores;
    attempts += r.attempts;
    injected += r.faults;
    stops += r.stops;
    stopped += r.stopped;
    drains += r.drains;
    max_process_steps = std::max(max_process_steps, r.max_process_steps);
    longest_idle_run = std::max(longest_idle_run, r.longest_idle_run);
  }
};

void print_json(const simulate_options& o, const simulate::seed_result& r) {
  const simulate::scenario& s = r.s;
  fmt::print("{{\"seed\":{},\"job\":\"{}\",\"faults\":\"{}\",\"ok\":{},\"steps\":{},\"simulated_seconds\":{:.6f},"
             "\"crashes\":{},\"restores\":{},\"attempts\":{},\"faults_injected\":{},\"output_lines\":{},"
             "\"stops\":{},\"stopped_runs\":{},\"drains\":{},\"max_process_steps\":{},\"longest_idle_run\":{},"
             "\"trace\":\"{:016x}\","
             "\"scenario\":{}{}}}\n",
             s.seed, simulate::to_string(s.job), o.faults, r.failed ? "false" : "true", r.steps, r.simulated_seconds,
             r.crashes, r.restores, r.attempts, r.faults, r.output_lines, r.stops, r.stopped, r.drains,
             r.max_process_steps, r.longest_idle_run, r.trace_hash, json_string(s.describe()),
             r.failed ? ",\"failure\":" + json_string(r.failure) + ",\"reproduce\":" + json_string(reproduce(s, o))
                      : std::string());
}

void print_summary(const simulate_options& o, simulate::job_kind job, const totals& t, double wall) {
  const double per_minute = wall > 0 ? static_cast<double>(t.count) * 60.0 / wall : 0.0;
  if (o.json) {
    fmt::print("{{\"summary\":true,\"job\":\"{}\",\"faults\":\"{}\",\"plant\":{},\"seeds\":{},\"failures\":{},"
               "\"steps\":{},\"simulated_seconds\":{:.3f},\"crashes\":{},\"restores\":{},\"attempts\":{},"
               "\"faults_injected\":{},\"stops\":{},\"stopped_runs\":{},\"drains\":{},\"max_process_steps\":{},"
               "\"longest_idle_run\":{},"
               "\"wall_seconds\":{:.3f},\"seeds_per_minute\":{:.1f}}}\n",
               simulate::to_string(job), o.faults, json_string(o.plant), t.count, t.failures, t.steps, t.simulated,
               t.crashes, t.restores, t.attempts, t.injected, t.stops, t.stopped, t.drains, t.max_process_steps,
               t.longest_idle_run, wall, per_minute);
    return;
  }
  fmt::print("simulate {} (faults {}{}): {} seeds, {} failed; {} steps, {:.1f} s simulated, {} crashes, {} restore "
             "points, {} stops ({} ended a run, {} drained), {} job runs, {} faults injected; {:.1f} s ({:.0f} "
             "seeds/min)\n",
             simulate::to_string(job), o.faults, o.plant.empty() ? "" : ", plant " + o.plant, t.count, t.failures,
             t.steps, t.simulated, t.crashes, t.restores, t.stops, t.stopped, t.drains, t.attempts, t.injected, wall,
             per_minute);
}

}  // namespace

void add_simulate_options(CLI::App& command, simulate_options& o) {
  command.add_option("--job", o.job, "wordcount, window, join or generate");
  command.add_option("--seeds", o.seeds, "The seeds to run: A-B (inclusive) or one seed A");
  command.add_option("--faults", o.faults, "all, none, disk, net or crash")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "none", "disk", "net", "crash"}));
  command.add_option("--plant", o.plant, "Switch on a planted bug (see --list-plants); exit 0 if a seed finds it");
  command.add_flag("--json", o.json, "One JSON object per seed, then a summary object");
  command.add_flag("--trace", o.trace, "Print every scheduling and fault decision (to read one seed)");
  command.add_flag("--list-plants", o.list_plants, "Print the planted bugs this build has, one a line");
  add_number_option(command, "--ring", o.ring,
                    "Give every executor a ring of N operations in flight, for every seed (at least 3; 0: each "
                    "seed's own)",
                    0, 1'000'000);
  command.add_flag("--first-failure", o.first_failure,
                   "Stop after the first seed that fails (with --plant: once the planted bug is found)");
  add_number_option(command, "--twice-every", o.twice_every,
                    "Run every N-th seed twice and require the same trace (0: never)", 0, 1'000'000);
  command.add_option("--stop", o.stop,
                     "Every seed stops its job while it runs, as SIGTERM does: drain, now, drain-now (a drain, then "
                     "a stop now while it runs) or none (default: a quarter of the seeds draw one)")
      ->check(CLI::IsMember({"drain", "now", "drain-now", "none"}));
  add_number_option(command, "--max-steps", o.max_steps,
                    "A simulated process that takes more steps than this is hung (0: no limit)", 0,
                    std::numeric_limits<std::uint64_t>::max());
  add_number_option(command, "--max-idle-steps", o.max_idle_steps,
                    "A simulated process that takes this many steps in a row without an operation completing or "
                    "time jumping to a timer is hung (a busy loop; 0: no limit)", 0,
                    std::numeric_limits<std::uint64_t>::max());
  add_number_option(command, "--spin-limit-seconds", o.spin_limit_seconds,
                    "A simulated process that uses this much CPU time (or 30 times as much real time) without "
                    "beginning a step spins (or blocks) inside one: it is killed and reported as hung", 0.1, 3600.0);
  add_number_option(command, "--soak-minutes", o.soak_minutes,
                    "Soak: after the last seed, go on with the next ones until this many minutes passed", 0,
                    7 * 24 * 60);
}

int run_simulate(const simulate_options& o) {
  if (o.list_plants) {
    for (const char* name : runtime::plants()) fmt::print("{}\n", name);
    return 0;
  }
  const auto job = simulate::parse_job(o.job);
  if (!job) {
    fmt::print(stderr, "sluice simulate: --job must be wordcount, window, join or generate (got '{}')\n", o.job);
    return exit_usage;
  }
  std::string why;
  const auto seeds = parse_range(o.seeds, why);
  if (!seeds) {
    fmt::print(stderr, "sluice simulate: --seeds must be A-B with A <= B, or one seed A, each 0 to {} (got '{}'{})\n",
               UINT64_MAX, o.seeds, why.empty() ? "" : ": " + why);
    return exit_usage;
  }
  if (o.ring != 0 && o.ring < smallest_ring()) {
    fmt::print(stderr,
               "sluice simulate: --ring {} cannot run a tcp channel; the smallest ring is {}: waits (recv, accept, "
               "connect) may hold only {} of a ring of {}'s places (runtime/admission.hpp), and an executor's "
               "listening accept holds it until a peer connects, so no tcp channel could connect (0: each seed "
               "draws its own ring)\n",
               o.ring, smallest_ring(), runtime::wait_capacity_for(o.ring), o.ring);
    return exit_usage;
  }
  const fault_class faults = *simulate::parse_faults(o.faults);
  if (!o.plant.empty()) {
    if (!runtime::plant_known(o.plant)) {
      fmt::print(stderr, "sluice simulate: this build has no planted bug '{}' (see --list-plants{})\n", o.plant,
                 runtime::plants().empty() ? "; it was built without -DSLUICE_PLANTS=ON" : "");
      return exit_usage;
    }
    runtime::set_plant(o.plant.c_str());
  }
  const auto started = std::chrono::steady_clock::now();
  const auto soak_until = started + std::chrono::minutes(o.soak_minutes);
  totals t;
  // Seed after seed up to the last one, then (a soak) on until its time is up. The last seed may be
  // 2^64-1: the loop ends there rather than wrap to 0.
  for (std::uint64_t seed = seeds->first;; ++seed) {
    if (seed > seeds->second && (o.soak_minutes == 0 || std::chrono::steady_clock::now() >= soak_until)) break;
    simulate::scenario s = simulate::make_scenario(*job, seed, faults, o.plant);
    if (o.ring != 0) s.ring_entries = o.ring;
    if (!o.stop.empty()) simulate::force_stop(s, *simulate::parse_stop(o.stop));
    if (o.trace) fmt::print(stderr, "seed {}: {}\n", seed, s.describe());
    const simulate::seed_result r = simulate::run_seed(s, seed_options_for(o, seed));
    t.add(r);
    if (o.json) {
      print_json(o, r);
    } else if (r.failed) {
      fmt::print("FAIL seed {} ({}): {}\n  reproduce: {}\n", seed, s.describe(), r.failure, reproduce(s, o));
    }
    std::fflush(stdout);
    if (r.failed && o.first_failure) break;
    if (seed == UINT64_MAX) break;  // no seed after it
  }
  print_summary(o, *job, t, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  const std::uint64_t failures = t.failures;
  if (!o.plant.empty()) {
    if (failures == 0) fmt::print("planted bug '{}' ESCAPED: no seed found it\n", o.plant);
    return failures > 0 ? 0 : 1;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace sluice::apps
