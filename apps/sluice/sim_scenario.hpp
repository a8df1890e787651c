#pragma once
// One simulated job run, derived from a seed: the job and its settings, its inputs on the simulated
// disk, the fault rates and how often the process crashes (`sluice simulate`, docs/simulation.md).

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/sim/disk.hpp>
#include <sluice/sim/disk_image.hpp>
#include <sluice/sim/world.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::apps::simulate {

enum class job_kind { wordcount, window, join, generate };
enum class fault_class { all, none, disk, net, crash };
// A stop asked for while the job runs, as SIGTERM asks it (job_settings::drain, ::stop): a drain, a
// stop now, or a drain and then, while it runs, a stop now (a second signal).
enum class stop_kind { none, drain, now, drain_now };

std::optional<job_kind> parse_job(std::string_view name);
std::optional<fault_class> parse_faults(std::string_view name);
std::optional<stop_kind> parse_stop(std::string_view name);
const char* to_string(job_kind k) noexcept;
const char* to_string(fault_class f) noexcept;
const char* to_string(stop_kind k) noexcept;

struct scenario {
  job_kind job = job_kind::wordcount;
  std::uint64_t seed = 0;
  fault_class faults = fault_class::all;
  std::string plant;  // a planted bug to switch on ("" none)

  // Derived from the seed.
  std::size_t parallelism = 2;
  unsigned executors = 2;
  std::string transport = "local";
  snapshot::checkpoint_mode mode = snapshot::checkpoint_mode::aligned;
  std::chrono::milliseconds interval{10};
  std::chrono::milliseconds alignment_timeout{2};
  std::chrono::milliseconds checkpoint_timeout{600'000};
  std::size_t floating_buffers = 8;
  std::size_t segment_bytes = 32 * 1024;
  std::uint64_t lines = 200;       // input lines (each join side: rows)
  bool big_records = false;        // some lines, and some words, longer than a segment
  std::uint64_t distinct = 0;      // wordcount: words are this many ids (0: the 100-word vocabulary)
  std::uint64_t state_ttl_ms = 0;  // join: a regular join with this event-time state TTL (0: the window join)
  sim::fault_rates rates{};
  unsigned crashes = 0;            // process crashes to place
  std::uint32_t batch_limit = 4;
  std::size_t ring_entries = 0;    // operations in flight per executor before a backlog (0: no cap)
  // The least time the sink spends per output line (0: none): data queues in the gates in front of
  // it, where an aligned-timeout checkpoint's barrier waits behind it (the alignment bound's oracle).
  std::chrono::microseconds slow_sink{0};
  // The stop, if any: at stop_at_permille thousandths of the reference run's steps (the first process
  // of the seed that gets there sends it); drain_now's stop now follows its drain by
  // second_stop_steps steps.
  stop_kind stop = stop_kind::none;
  std::uint32_t stop_at_permille = 0;
  std::uint32_t second_stop_steps = 0;

  // One line: everything above.
  std::string describe() const;
};

scenario make_scenario(job_kind job, std::uint64_t seed, fault_class faults, std::string plant = {});
// Makes every seed send `kind` (sluice simulate --stop), where a seed's own draw would send none or
// another: at the same point if the seed drew one, else at a point drawn from the seed.
void force_stop(scenario& s, stop_kind kind);

// Where things are on the simulated disk.
inline constexpr std::string_view sim_root = "/sim";
inline constexpr std::string_view output_dir = "/sim/out";
inline constexpr std::string_view checkpoint_dir = "/sim/checkpoints";
// A directory named like a checkpoint that the job did not make, with a file in it: half the seeds
// start with it (plants_foreign_entry), and it must be there, unchanged, after every run of the job
// (retention removes only what sluice made).
inline constexpr std::string_view foreign_file = "/sim/checkpoints/chk-1/not-sluice.txt";
inline constexpr std::string_view foreign_text = "planted by the simulation: not sluice's\n";
// Drawn from the seed on a stream of its own: the scenario's other draws are as without it.
bool plants_foreign_entry(const scenario& s);

// The disk at the start: the job's inputs, durable.
sim::disk_image initial_image(const scenario& s);
// Builds the job's graph.
void build_job(dataflow::job_builder& job, const scenario& s);
dataflow::job_settings settings_for(const scenario& s, runtime::simulation* simulation);
// Every line of the published output files (names not starting with '.' or '_'), sorted.
std::vector<std::string> published_lines(const sim::disk_image& image);

}  // namespace sluice::apps::simulate
