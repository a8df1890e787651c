#include "jobs_cmd.hpp"
#include "cli_options.hpp"
#include "connector_urls.hpp"
#include "progress.hpp"
#include "progress_sampler.hpp"
#include "service_notify.hpp"

#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/cpus.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/memory_limit.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/dataflow/samples.hpp>

#include <fmt/core.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <exception>

namespace sluice::apps {

namespace {
// What every job command's --help ends with: its exit codes and the progress line's fields
// (docs/cli.md has the full table of restarts and exit codes).
constexpr const char* job_help_footer = R"(Exit codes:
  0    done, or drained by SIGTERM (a final checkpoint taken and published)
  1    failed (a task, a sink's commit, an input that changed, out of memory), naming the cause;
       the rerun with the same arguments resumes from the newest valid checkpoint
  2    refused before any task ran (bad usage, another job's checkpoint, a directory in use,
       a thread that cannot start); nothing was changed
  130  stopped at once (SIGINT, SIGTERM with --on-sigterm now, a second signal during a drain);
       the rerun resumes

The progress line (on a terminal; --quiet hides it) and the closing summary:
  ELAPSED | P% (of the input read), T left | N lines read (SIZE) | R lines/s (what the sources
  read: lines for wordcount, rows for join, events for nexmark; the bytes of an input file) |
  N written (records the sinks published) | backpressure B% (share of time the tasks waited for
  output credit) | last chk-N: D ms, SIZE (the newest completed checkpoint) | chk-N running T
  (one running for a second or more) | N aborted (checkpoints))";
}  // namespace

void add_job_options(CLI::App& command, job_cli_options& o) {
  command.footer(job_help_footer);
  command.add_option("--checkpoint-dir", o.checkpoint_dir, "Where checkpoints go; a valid one there is resumed from")
      ->required();
  add_number_option(command, "--checkpoint-interval-ms", o.checkpoint_interval_ms, "Between periodic checkpoints", 1,
                    limits::max_interval_ms);
  command.add_option("--checkpoint-mode", o.checkpoint_mode, "aligned, unaligned or aligned-timeout")
      ->capture_default_str()
      ->check(CLI::IsMember({"aligned", "unaligned", "aligned-timeout"}));
  add_number_option(command, "--alignment-timeout-ms", o.alignment_timeout_ms,
                    "aligned-timeout: alignment longer than this switches the checkpoint to unaligned", 0,
                    limits::max_interval_ms);
  add_number_option(command, "--parallelism", o.parallelism, "Tasks per stage", 1, limits::max_parallelism);
  command.add_option("--transport", o.transport, "Channels between stages: local or tcp (loopback)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "tcp"}));
  add_number_option(command, "--executors", o.executors,
                    "Executor threads; 0: one per CPU this process may run on (its affinity mask, which taskset "
                    "and a cgroup cpuset set)",
                    0, limits::max_executors);
  add_number_option(command, "--max-record-bytes", o.max_record_bytes,
                    "The largest record (a line read is one record); a larger one fails the job", 1,
                    std::uint64_t{1} << 30);
  add_number_option(command, "--network-memory", o.network_memory_mib,
                    "MiB for channel buffers at most (the need: executors x the busiest executor's buffers x "
                    "32 KiB); a job that needs more is refused at start, with the numbers",
                    1, limits::max_network_memory_mib);
  command.add_flag("--quiet", o.quiet, "No progress line (the final summary is always printed)");
  command.add_option("--on-sigterm", o.on_sigterm,
                     "SIGTERM: drain (stop with a final checkpoint, exit 0) or now (as SIGINT: exit 130); "
                     "either way the next run resumes")
      ->capture_default_str()
      ->check(CLI::IsMember({"drain", "now"}));
  command.add_option("--metrics", o.metrics,
                     "Serve Prometheus metrics at http://HOST:PORT/metrics and a status page at http://HOST:PORT/ "
                     "while the job runs (HOST:PORT, :PORT for every interface; port 0: any free one, logged)");
  add_cluster_options(command, o.cluster);
}

namespace {

// The word count's and the join's throttle (not part of the job's identity: it changes when lines are
// written, not which).
void add_slow_sink_option(CLI::App& command, std::uint64_t& slow_sink_us) {
  add_number_option(command, "--slow-sink-us", slow_sink_us,
                    "The sink spends at least this long per output line (backpressure, for trying unaligned "
                    "checkpoints)",
                    0, limits::max_slow_sink_us);
}

snapshot::checkpoint_mode parse_mode(const std::string& m) {
  if (m == "unaligned") return snapshot::checkpoint_mode::unaligned;
  if (m == "aligned-timeout") return snapshot::checkpoint_mode::aligned_timeout;
  return snapshot::checkpoint_mode::aligned;
}

// What a sample job's sources read, as its progress line and summary count it.
const char* source_unit(const char* what) {
  const std::string_view w(what);
  if (w == "wordcount") return "lines";
  if (w == "join") return "rows";
  if (w == "nexmark") return "events";
  return "records";
}

// The progress part of the summary: the whole run, at its average rate.
std::string progress_text(const dataflow::job_progress& p, const char* what) {
  return format_progress(summary_fields(p, source_unit(what)));
}

// SIGINT and SIGTERM stay blocked on this thread from before the job's engine starts to the process's
// exit. The engine reads them while the job runs and, when it stops, restores the mask it found: were
// they unblocked then, a second SIGTERM that came just as a drain ended would kill the process with
// the signal's default action after the job had ended whole (exit 143 in place of 0). Blocked, it
// stays pending and goes with the process: there is nothing left to stop. (A signal before the
// engine starts waits for it, and stops the job at once or drains it as soon as it runs.)
void hold_stop_signals_to_exit() {
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
}

int run(dataflow::job_builder& job, const job_cli_options& o, const char* what, const job_summary_fn& extra) {
  hold_stop_signals_to_exit();
  dataflow::job_settings settings;
  settings.checkpoint_dir = o.checkpoint_dir;
  settings.checkpoint_interval = std::chrono::milliseconds(o.checkpoint_interval_ms);
  settings.mode = parse_mode(o.checkpoint_mode);
  settings.alignment_timeout = std::chrono::milliseconds(o.alignment_timeout_ms);
  settings.transport = *dataflow::parse_transport(o.transport);
  settings.executors = o.executors == 0 ? runtime::available_cpus() : o.executors;
  settings.max_record_bytes = static_cast<std::size_t>(o.max_record_bytes);
  settings.network_memory_limit_bytes = static_cast<std::size_t>(o.network_memory_mib) << 20;
  settings.metrics_address = o.metrics;
  // Two threads use `line` and `sampler`, never at once: on_progress runs on the job's host thread
  // (never an executor: a paused terminal slows the line, not the job), and this thread finishes the
  // line after run_job returned, which it does only once the last callback has returned. So they
  // need no lock. (The log's writer thread prints above the line
  // meanwhile, through print_above, which locks the line's output.)
  settings.handle_signals = true;
  settings.sigterm = o.on_sigterm == "now" ? dataflow::stop_mode::now : dataflow::stop_mode::drain;
  progress_line line({.quiet = o.quiet});
  progress_sampler sampler(source_unit(what));
  // Under systemd (NOTIFY_SOCKET): READY=1, STATUS=, WATCHDOG=1, STOPPING=1 (service_notify.hpp).
  // All three callbacks run on the job's host thread, as the line's do: a service manager that does
  // not read its socket (sd_notify blocks) delays the notifications, never the job.
  service_notify notify;
  if (line.draws() || notify.active()) {
    const bool draws = line.draws();
    settings.on_progress = [&line, &sampler, &notify, draws](const dataflow::job_progress& p) {
      const progress_fields fields = sampler.next(p);
      if (draws) {
        line.set(fields);
        line.update();
      }
      notify.progress(format_progress(fields), std::chrono::steady_clock::now());
    };
  }
  if (notify.active()) {
    settings.on_ready = [&notify](std::optional<snapshot::checkpoint_id> from) { notify.ready(from); };
    settings.on_stopping = [&notify](dataflow::stop_mode mode) { notify.stopping(mode); };
  }
  // The endpoint's address, with the port the kernel chose for port 0 (the host as given).
  if (!o.metrics.empty()) {
    std::string host = o.metrics.substr(0, o.metrics.rfind(':'));
    if (host.empty()) host = "0.0.0.0";
    settings.on_metrics_listening = [&line, what, host](std::uint16_t port) {
      const std::string at = fmt::format("{}:{}", host, port);
      line.print_above(fmt::format("sluice {}: status page on http://{}/, metrics on http://{}/metrics", what, at, at));
    };
  }
  // While the status line is drawn, log lines go above it instead of running into it.
  runtime::log::sink above;
  if (line.draws()) above = [&line](const runtime::log::event& e) { line.print_above(e.line); };
  const runtime::log::scoped_sink logs_above(std::move(above));
  dataflow::job_result r;
  if (o.cluster.given()) {
    auto worker = worker_options_of(o.cluster);
    if (auto* why = std::get_if<std::string>(&worker)) {
      fmt::print(stderr, "sluice {}: {}\n", what, *why);
      return 2;
    }
    r = cluster::run_worker(job, settings, std::get<cluster::worker_options>(std::move(worker)));
  } else {
    r = dataflow::run_job(job, settings);
  }
  std::string summary;
  if (r.resumed_from) summary += fmt::format("sluice {}: resumed from checkpoint {}\n", what, *r.resumed_from);
  if (r.exit_code == 2) {
    summary += fmt::format("sluice {}: refused: {}", what, r.message);  // nothing ran
  } else {
    summary += fmt::format("sluice {}: {}; {} checkpoints completed, {} aborted; {}", what,
                           r.stopped_at ? "stopped (resumable)"
                           : r.exit_code == 0 ? "done"
                           : r.exit_code == 130 ? "stopped (resumable)"
                                                : "FAILED",
                           r.final.checkpoints_completed,
                           r.final.checkpoints_aborted, progress_text(r.final, what));
    if (r.exit_code != 0 || !r.message.empty()) summary += fmt::format("\nsluice {}: {}", what, r.message);
    if (extra) summary += extra(r);
  }
  line.finish(summary);
  return r.exit_code;
}

// An input: a file that exists (PATH or file:///PATH), or a stream's URL, which parse_lines_input
// checks when the job is built and says what is wrong with.
CLI::Validator file_or_stream() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (is_connector_url(v)) return {};
        return CLI::ExistingFile(v.rfind("file://", 0) == 0 ? v.substr(7) : v);
      },
      "FILE|URL");
}

}  // namespace

void add_wordcount_options(CLI::App& command, wordcount_cli& o) {
  command
      .add_option("--input", o.input,
                  "What to count the words of: a text file (PATH or file:///PATH), a JetStream stream "
                  "(nats://HOST:PORT/STREAM, a message a line) or a Kafka topic (kafka://BROKERS/TOPIC)")
      ->required()
      ->check(file_or_stream());
  command
      .add_option("--output", o.output,
                  "Where the counts go: a directory for the published output files ('word count' lines), "
                  "nats://HOST:PORT/SUBJECT or kafka://BROKERS/TOPIC (a message a line), or a table: "
                  "postgresql://USER@HOST:PORT/DB?table=T (made if missing: word text primary key, count bigint)")
      ->required();
  command.add_flag("--bounded", o.bounded,
                   "A stream input ends where the stream ended when the job first started (a resumed job stops "
                   "at the same place)");
  add_number_option(command, "--window-lines", o.window_lines,
                    "Count per tumbling window of N input lines ('window_start word count' lines); 0: totals", 0,
                    limits::max_lines);
  add_slow_sink_option(command, o.slow_sink_us);
  add_job_options(command, o.job);
}

// A sample job: its stages added by build(job), then run (run_job makes and locks the output
// directory once the checkpoint is known to be this job's, so a refused run changes nothing). Bad
// usage (a bad option, a graph that cannot run) is exit code 2.
int run_sample(const char* what, const job_cli_options& o, const std::function<void(dataflow::job_builder&)>& build,
               const job_summary_fn& extra) {
  try {
    dataflow::job_builder job(what);
    build(job);
    return run(job, o, what, extra);
  } catch (const std::bad_alloc& e) {  // (start-up's own memory: the pools, the executors' rings)
    fmt::print(stderr, "sluice {}: refused: out of memory while starting the job ({}){}\n", what, e.what(),
               runtime::address_space_note());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "sluice {}: {}\n", what, e.what());
    return 2;
  }
}

int run_wordcount(const wordcount_cli& o) {
  return run_sample("wordcount", o.job, [&o](dataflow::job_builder& job) {
    dataflow::wordcount_options options;
    options.parallelism = o.job.parallelism;
    options.window_lines = o.window_lines;
    options.slow_sink = std::chrono::microseconds(o.slow_sink_us);
    set_wordcount_io(options, o.input, o.output, o.bounded);
    dataflow::build_wordcount(job, options);
  });
}

void add_join_options(CLI::App& command, join_cli& o) {
  command
      .add_option("--left", o.left,
                  "Left input: CSV lines 'key,timestamp_ms,payload' sorted by timestamp, in a file (PATH or "
                  "file:///PATH), a JetStream stream (nats://HOST:PORT/STREAM) or a Kafka topic "
                  "(kafka://BROKERS/TOPIC), a message a line")
      ->required()
      ->check(file_or_stream());
  command.add_option("--right", o.right, "Right input, like --left")->required()->check(file_or_stream());
  command.add_flag("--bounded", o.bounded,
                   "A stream input ends where the stream ended when the job first started (a resumed job stops "
                   "at the same place)");
  add_number_option(command, "--max-out-of-orderness-ms", o.max_out_of_orderness_ms,
                    "How far behind the latest line of a stream input a line may come (watermarks trail the "
                    "latest timestamp by this; a line further behind fails the job). A file must be sorted",
                    0, limits::max_span_ms);
  command.add_option("--output", o.output,
                     "Directory for the published output files ('window_start key left_payload right_payload' "
                     "lines), or nats://HOST:PORT/SUBJECT or kafka://BROKERS/TOPIC (a message a line)")
      ->required();
  add_optional_number_option(command, "--window-ms", o.window_ms,
                    "Tumbling window size in milliseconds: rows of a key in the same window join (the window join)",
                    1, limits::max_span_ms);
  add_optional_number_option(command, "--state-ttl-ms", o.state_ttl_ms,
                    "Instead of --window-ms: a regular join whose rows of a key join when less than this many "
                    "milliseconds apart; its state keeps each row this long past the watermark (an event-time "
                    "state TTL), so it runs in bounded memory. Output lines 'left_time key left_payload "
                    "right_payload'",
                    1, limits::max_span_ms);
  add_slow_sink_option(command, o.slow_sink_us);
  add_job_options(command, o.job);
}

int run_join(const join_cli& o) {
  return run_sample("join", o.job, [&o](dataflow::job_builder& job) {
    if ((o.window_ms == 0) == (o.state_ttl_ms == 0)) {
      throw std::invalid_argument("give --window-ms (the window join) or --state-ttl-ms (a regular join with a "
                                  "state TTL), one of them");
    }
    dataflow::join_options options;
    options.parallelism = o.job.parallelism;
    options.window_ms = o.window_ms == 0 ? options.window_ms : o.window_ms;
    options.state_ttl_ms = o.state_ttl_ms;
    options.slow_sink = std::chrono::microseconds(o.slow_sink_us);
    options.max_out_of_orderness_ms = o.max_out_of_orderness_ms;
    set_join_io(options, o.left, o.right, o.bounded);
    set_join_output(options, o.output);
    dataflow::build_join(job, options);
  });
}

void add_join_input_options(CLI::App& command, join_input_cli& o) {
  command.add_option("--output", o.output, "File to write")->required();
  add_number_option(command, "--rows", o.rows, "Lines", 0, limits::max_lines);
  add_number_option(command, "--keys", o.keys, "Distinct keys (k0, k1, ...)", 1, limits::max_lines);
  add_number_option(command, "--span-ms", o.span_ms, "Timestamps run from 0 to this, evenly", 0, limits::max_span_ms);
  add_number_option(command, "--seed", o.seed, "Seed: the same seed gives the same keys", 0, UINT64_MAX);
  command.add_option("--prefix", o.prefix, "Payload prefix (payload = prefix + line number)")->capture_default_str();
}

int run_join_input(const join_input_cli& o) {
  dataflow::join_input_spec spec{o.rows, o.keys, o.span_ms, o.seed, o.prefix};
  io::result<std::uint64_t> written = runtime::sync_wait(dataflow::write_join_input(o.output, spec));
  if (!written) {
    fmt::print(stderr, "sluice join-input: {}\n", written.error().message());
    return 1;
  }
  fmt::print(stderr, "sluice join-input: {} lines, {} bytes in {}\n", o.rows, written.value(), o.output);
  return 0;
}

void add_corpus_options(CLI::App& command, corpus_cli& o) {
  command.add_option("--output", o.output, "File to write")->required();
  add_number_option(command, "--lines", o.lines, "Lines of words", 0, limits::max_lines);
  add_number_option(command, "--seed", o.seed, "Seed: the same seed gives the same corpus", 0, UINT64_MAX);
  add_number_option(command, "--distinct", o.distinct,
                    "Words are this many distinct ids (u0, u1, ...) drawn uniformly, as a service's users or "
                    "sessions; 0: text from a 100-word vocabulary",
                    0, UINT64_MAX);
}

int run_corpus(const corpus_cli& o) {
  io::result<std::uint64_t> written = runtime::sync_wait(dataflow::write_corpus(o.output, o.lines, o.seed, o.distinct));
  if (!written) {
    fmt::print(stderr, "sluice corpus: {}\n", written.error().message());
    return 1;
  }
  fmt::print(stderr, "sluice corpus: {} lines, {} bytes in {}\n", o.lines, written.value(), o.output);
  return 0;
}

}  // namespace sluice::apps
