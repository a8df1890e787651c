// Seeds to simulated job runs (see sim_scenario.hpp).

#include "sim_scenario.hpp"

#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/sim/random.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace sluice::apps::simulate {

namespace {
constexpr const char* job_names[] = {"wordcount", "window", "join", "generate"};
constexpr const char* fault_names[] = {"all", "none", "disk", "net", "crash"};
constexpr const char* stop_names[] = {"none", "drain", "now", "drain-now"};

// Where a seed's stop goes, from a stream of its own (so no other knob of an older seed moves).
sim::rng stop_stream(std::uint64_t seed, job_kind job) {
  return sim::rng(seed * 0x9e3779b97f4a7c15ull ^ 0x5709'5709ull ^ static_cast<std::uint64_t>(job));
}
void place_stop(scenario& s, sim::rng& r) {
  // Anywhere from just after the start to past the reference run's end (a stop that comes after
  // the job finished is never sent).
  s.stop_at_permille = static_cast<std::uint32_t>(r.between(5, 1100));
  s.second_stop_steps = static_cast<std::uint32_t>(r.between(1, 500));  // most while the drain runs
}

const char* mode_name(snapshot::checkpoint_mode m) {
  switch (m) {
    case snapshot::checkpoint_mode::aligned: return "aligned";
    case snapshot::checkpoint_mode::unaligned: return "unaligned";
    case snapshot::checkpoint_mode::aligned_timeout: return "aligned-timeout";
    default: return "other";
  }
  return "?";
}

std::string join_side(const scenario& s, std::uint64_t salt, const char* prefix) {
  dataflow::join_input_spec spec;
  spec.rows = s.lines;
  spec.keys = 1 + s.seed % 17;
  spec.span_ms = 2000 + s.seed % 3000;
  spec.seed = s.seed * 31 + salt;
  spec.prefix = prefix;
  std::string out;
  for (std::uint64_t n = 0; n < spec.rows; ++n) out.append(dataflow::join_input_line(spec, n)).append("\n");
  return out;
}
}  // namespace

std::optional<job_kind> parse_job(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (name == job_names[i]) return static_cast<job_kind>(i);
  }
  return std::nullopt;
}

std::optional<fault_class> parse_faults(std::string_view name) {
  for (int i = 0; i < 5; ++i) {
    if (name == fault_names[i]) return static_cast<fault_class>(i);
  }
  return std::nullopt;
}

std::optional<stop_kind> parse_stop(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (name == stop_names[i]) return static_cast<stop_kind>(i);
  }
  return std::nullopt;
}

const char* to_string(stop_kind k) noexcept { return stop_names[static_cast<int>(k)]; }
const char* to_string(job_kind k) noexcept { return job_names[static_cast<int>(k)]; }
const char* to_string(fault_class f) noexcept { return fault_names[static_cast<int>(f)]; }

std::string scenario::describe() const {
  return fmt::format(
      "job={} seed={} faults={}{} parallelism={} executors={} transport={} mode={} interval={}ms "
      "alignment-timeout={}ms{} floating={} segment={}KiB lines={}{}{} crashes={} batch={}{}{}{}{}",
      to_string(job), seed, to_string(faults), plant.empty() ? "" : " plant=" + plant, parallelism, executors,
      transport, mode_name(mode), interval.count(), alignment_timeout.count(),
      checkpoint_timeout.count() < 600'000 ? fmt::format(" checkpoint-timeout={}ms", checkpoint_timeout.count()) : "",
      floating_buffers,
      segment_bytes / 1024, lines, distinct != 0 ? fmt::format(" distinct={}", distinct) : std::string(),
      big_records ? " big-records" : "", crashes, batch_limit,
      ring_entries != 0 ? fmt::format(" ring={}", ring_entries) : std::string(),
      slow_sink.count() != 0 ? fmt::format(" slow-sink={}us", slow_sink.count()) : std::string(),
      state_ttl_ms != 0 ? fmt::format(" state-ttl={}ms", state_ttl_ms) : std::string(),
      stop == stop_kind::none ? std::string()
                              : fmt::format(" stop={}@{}.{}%{}", to_string(stop), stop_at_permille / 10,
                                            stop_at_permille % 10,
                                            stop == stop_kind::drain_now ? fmt::format("+{}", second_stop_steps) : ""));
}

scenario make_scenario(job_kind job, std::uint64_t seed, fault_class faults, std::string plant) {
  scenario s;
  s.job = job;
  s.seed = seed;
  s.faults = faults;
  s.plant = std::move(plant);
  // Its own stream, so adding a knob later changes no other knob's value for old seeds.
  sim::rng r(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(job) + 1);
  s.parallelism = r.between(1, 3);
  s.executors = static_cast<unsigned>(r.between(1, 3));
  s.transport = r.coin() ? "tcp" : "local";
  s.mode = static_cast<snapshot::checkpoint_mode>(r.below(3));
  s.interval = std::chrono::milliseconds(r.between(2, 30));
  s.alignment_timeout = std::chrono::milliseconds(r.between(0, 5));
  s.floating_buffers = r.between(1, 8);
  s.lines = r.between(20, 400);
  s.big_records = job == job_kind::wordcount && r.below(4) == 0;
  // Knobs added later draw from a stream of their own, so the ones above keep their values.
  sim::rng later(seed * 0x9e3779b97f4a7c15ull ^ 0xb16b16 ^ static_cast<std::uint64_t>(job));
  if (job == job_kind::window) s.big_records = later.below(4) == 0;
  // A job runs for some 10 ms of simulated time: with an interval of 2-30 ms most runs would take
  // only their final checkpoint, after the data. Half the seeds checkpoint every 1-4 ms, while
  // records, barriers and aborts are in flight.
  if (later.coin()) s.interval = std::chrono::milliseconds(later.between(1, 4));
  // Segments of 4, 8, 16 or 32 KiB: with small ones more records span buffers, and more buffers
  // and credits change hands.
  s.segment_bytes = std::size_t{4096} << later.below(4);
  // A third of the seeds expire checkpoints after 3-10 ms: under slow operations and stalled
  // connections some are aborted while their barriers are still on the way, and arrive obsolete.
  if (later.below(3) == 0) s.checkpoint_timeout = std::chrono::milliseconds(later.between(3, 10));
  // A sixth of the seeds abort checkpoints almost as soon as they start (they expire after 4-6 ms
  // and come every 1-2 ms): the barriers of an aborted checkpoint still travel behind the next
  // one's and arrive obsolete at tasks aligning it (FLINK-20654). A stream of its own again.
  sim::rng storm(seed * 0x9e3779b97f4a7c15ull ^ 0x0b5013e7ull ^ static_cast<std::uint64_t>(job));
  if (storm.below(6) == 0) {
    s.checkpoint_timeout = std::chrono::milliseconds(storm.between(4, 6));
    s.interval = std::chrono::milliseconds(storm.between(1, 2));
  }
  s.batch_limit = static_cast<std::uint32_t>(r.between(1, 8));
  const bool disk = faults == fault_class::all || faults == fault_class::disk;
  const bool net = faults == fault_class::all || faults == fault_class::net;
  const bool crash = faults == fault_class::all || faults == fault_class::crash;
  if (disk) {
    s.rates.disk_error = static_cast<std::uint32_t>(r.between(0, 3000));
    s.rates.disk_full = static_cast<std::uint32_t>(r.between(0, 2000));
    s.rates.short_io = static_cast<std::uint32_t>(r.between(0, 100'000));
    s.rates.slow_io = static_cast<std::uint32_t>(r.between(0, 5000));
  }
  if (net) {
    s.rates.net_reset = static_cast<std::uint32_t>(r.between(0, 2000));
    s.rates.net_refuse = static_cast<std::uint32_t>(r.between(0, 50'000));
    s.rates.net_stall = static_cast<std::uint32_t>(r.between(0, 10'000));
    s.rates.short_io = std::max<std::uint32_t>(s.rates.short_io, static_cast<std::uint32_t>(r.between(0, 100'000)));
  }
  if (disk || net) s.rates.cancel_late = static_cast<std::uint32_t>(r.between(0, 200'000));
  if (crash) s.crashes = static_cast<unsigned>(r.between(1, 3));
  // A third of the seeds give each executor a ring of 16-48 operations, so submissions wait in its
  // backlog (a full SQ); with faults, half of them find the ring busy (EBUSY) now and then.
  if (later.below(3) == 0) s.ring_entries = later.between(16, 48);
  if ((disk || net) && later.coin()) s.rates.ring_busy = static_cast<std::uint32_t>(later.between(1000, 100'000));
  // Half the aligned-timeout seeds have a slow sink (20-300 us per output line), so data queues in
  // front of it and barriers wait behind that data. A stream of its own.
  sim::rng slow(seed * 0x9e3779b97f4a7c15ull ^ 0x51055105ull ^ static_cast<std::uint64_t>(job));
  if (s.mode == snapshot::checkpoint_mode::aligned_timeout && slow.coin()) {
    s.slow_sink = std::chrono::microseconds(slow.between(20, 300));
  }
  // Half the join seeds without a slow sink run a regular join with an event-time state TTL of 20 to
  // 400 ms (the rows span 2-5 s) instead of the window join: entries expire, sweeps erase them into
  // deltas, and the output (the pairs less than the ttl apart) must still be the reference's. (A
  // regular join emits far more lines than a window join: behind a slow sink the runs outlasted
  // their budgets.) A stream of its own.
  sim::rng ttl(seed * 0x9e3779b97f4a7c15ull ^ 0x7711u ^ static_cast<std::uint64_t>(job));
  if (job == job_kind::join && s.slow_sink.count() == 0 && ttl.coin()) s.state_ttl_ms = ttl.between(20, 400);
  // A quarter of the word-count seeds count 2,000-20,000 distinct ids over 800-2,500 lines: each
  // counting task then emits thousands of keys at the end of its input, in several steps, and
  // checkpoints, crashes and stops land in the middle of that emission. A stream of its own.
  sim::rng ids(seed * 0x9e3779b97f4a7c15ull ^ 0x1d5u ^ static_cast<std::uint64_t>(job));
  if (job == job_kind::wordcount && !s.big_records && ids.below(4) == 0) {
    s.distinct = ids.between(2000, 20'000);
    s.lines = ids.between(800, 2500);
  }
  // A quarter of the seeds stop the job while it runs, as SIGTERM does: half of them drain, a
  // quarter stop now, a quarter drain and then stop now while the drain runs.
  sim::rng stops = stop_stream(seed, job);
  if (stops.below(4) == 0) {
    const std::uint64_t kind = stops.below(4);
    s.stop = kind < 2 ? stop_kind::drain : kind == 2 ? stop_kind::now : stop_kind::drain_now;
    place_stop(s, stops);
  }
  return s;
}

void force_stop(scenario& s, stop_kind kind) {
  if (s.stop == stop_kind::none && kind != stop_kind::none) {
    sim::rng r = stop_stream(s.seed, s.job);
    r.below(4);
    r.below(4);
    place_stop(s, r);
  }
  s.stop = kind;
}

bool plants_foreign_entry(const scenario& s) { return sim::rng(s.seed ^ 0xf0e16f0e16ull).coin(); }

sim::disk_image initial_image(const scenario& s) {
  sim::disk_image image;
  image.add_directory(std::string(sim_root));
  if (plants_foreign_entry(s)) image.add_file(std::string(foreign_file), std::string(foreign_text));
  switch (s.job) {
    case job_kind::wordcount:
    case job_kind::window: {
      dataflow::word_corpus_generator g(s.seed, s.distinct);
      std::string text;
      sim::rng r(s.seed ^ 0xb16);
      for (std::uint64_t n = 0; n < s.lines; ++n) {
        text.append(g.next_line());
        if (s.big_records && r.below(40) == 0) {
          // A line longer than a 32 KiB segment: one record that spans buffers.
          const std::size_t words = r.between(5000, 12000);
          for (std::size_t w = 0; w < words; ++w) text.append(" w").append(std::to_string(w % 97));
        }
        if (s.big_records && r.below(10) == 0) {
          // A word longer than a segment: the tokenizer's records then span buffers across a channel
          // (the key exchange to the counters, and on to the sink), and a snapshot may come while a
          // receiver holds part of one.
          text.append(" ").append(r.between(20'000, 100'000), static_cast<char>('a' + r.below(26)));
        }
        text.push_back('\n');
      }
      image.add_file(std::string(sim_root) + "/input.txt", std::move(text));
      break;
    }
    case job_kind::join:
      image.add_file(std::string(sim_root) + "/left.csv", join_side(s, 1, "l"));
      image.add_file(std::string(sim_root) + "/right.csv", join_side(s, 2, "r"));
      break;
    case job_kind::generate: break;
  }
  return image;
}

void build_job(dataflow::job_builder& job, const scenario& s) {
  const std::string root(sim_root);
  switch (s.job) {
    case job_kind::wordcount:
    case job_kind::window:
      dataflow::build_wordcount(job, {.input = root + "/input.txt",
                                      .output_dir = std::string(output_dir),
                                      .parallelism = s.parallelism,
                                      .window_lines = s.job == job_kind::window ? 1 + s.seed % 37 : 0,
                                      .slow_sink = s.slow_sink});
      return;
    case job_kind::join:
      dataflow::build_join(job, {.left = root + "/left.csv",
                                 .right = root + "/right.csv",
                                 .output_dir = std::string(output_dir),
                                 .parallelism = s.parallelism,
                                 .window_ms = 100 + s.seed % 500,
                                 .slow_sink = s.slow_sink,
                                 .state_ttl_ms = s.state_ttl_ms});
      return;
    case job_kind::generate: {
      using counted = std::pair<std::string, std::uint64_t>;
      const std::uint64_t modulus = 1 + s.seed % 29;
      job.generate<std::string>("gen", s.parallelism, s.lines * 10,
                                [modulus](std::uint64_t n) { return "k" + std::to_string((n * 2654435761u) % modulus); })
          .key_by<std::string>([](const std::string& k) { return k; })
          .aggregate<std::uint64_t, counted>(
              "count", s.parallelism, [](std::uint64_t& n, const std::string&) { ++n; },
              [](const std::string& k, const std::uint64_t& n) { return counted(k, n); })
          .write_lines(
              std::string(output_dir), [](const counted& c) { return c.first + " " + std::to_string(c.second); },
              dataflow::sink_options{s.slow_sink});
      return;
    }
  }
}

dataflow::job_settings settings_for(const scenario& s, runtime::simulation* simulation) {
  dataflow::job_settings settings;
  settings.checkpoint_dir = std::string(checkpoint_dir);
  settings.checkpoint_interval = s.interval;
  settings.mode = s.mode;
  settings.alignment_timeout = s.alignment_timeout;
  settings.checkpoint_timeout = s.checkpoint_timeout;
  settings.transport = *dataflow::parse_transport(s.transport);
  settings.executors = s.executors;
  settings.floating_buffers = s.floating_buffers;
  settings.segment_bytes = s.segment_bytes;
  settings.handle_signals = false;
  settings.simulation = simulation;
  return settings;
}

std::vector<std::string> published_lines(const sim::disk_image& image) {
  std::vector<std::string> out;
  const std::string prefix = std::string(output_dir) + "/";
  for (const sim::disk_image::entry& e : image.entries) {
    if (e.directory || e.path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = e.path.substr(prefix.size());
    if (name.empty() || name[0] == '.' || name[0] == '_' || name.find('/') != std::string::npos) continue;
    std::size_t start = 0;
    while (start < e.data.size()) {
      std::size_t end = e.data.find('\n', start);
      if (end == std::string::npos) end = e.data.size();
      out.push_back(e.data.substr(start, end - start));
      start = end + 1;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace sluice::apps::simulate
