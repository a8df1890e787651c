#pragma once
// run_job: runs a job graph (job.hpp) on an engine of its own until its bounded input is done, with
// periodic checkpoints and exactly-once output.
//
// - Start: if the checkpoint directory holds a valid checkpoint, the job resumes from the newest one
//   (job_result::resumed_from; the reason for any newer one skipped is logged); else it starts fresh.
//   A checkpoint whose job fingerprint differs from this run's (another job, graph, parallelism or
//   input), or that records none, is refused before any task starts: exit code 2, the message names
//   each difference (job_fingerprint.hpp). So is an input that is not a regular file.
// - Directories: before any task starts, the checkpoint directory and every output directory of the
//   job's sinks (job_builder::output_dirs()) are locked until run_job returns (`.sluice-lock`), and
//   each output directory must be the job's own (`.sluice-output`; a fresh run takes only an empty
//   or new one). A directory another job holds, one that cannot be written, or one holding output
//   that is not this job's is refused: exit code 2, the message naming the directory and why
//   (docs/cli.md, "Directories a job owns").
// - Placement (job_plan.hpp): task t (numbered stage by stage, subtask by subtask: the same numbers
//   every run) runs on executor t mod executors; everything of a task stays there. Each executor's
//   pool of network memory is the sum of its tasks' budgets (job_plan.hpp's task_buffers).
// - Channels between stages are local channels, or loopback TCP (one transport per executor) with
//   transport = tcp (channel_wiring.hpp).
// - End: when every source has passed its last record, the job takes a final checkpoint, so every
//   sink publishes its last output, then ends its partitions and exits 0.
// - Failure: an operator exception, an I/O error or a lost channel fails the job with a message
//   naming the task and the cause (exit code 1); a restart resumes from the latest checkpoint.
//   job_settings::stop (or, with handle_signals, SIGINT) stops it at once (exit code 130);
//   job_settings::drain stops it with a final checkpoint (exit code 0, job_result::stopped_at); the
//   next run resumes either way. A job can also run in the host's own engine: job_handle.hpp.

#include <sluice/buffers/segment.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/simulation.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>

namespace sluice::dataflow {

// How a job is asked to stop (job_handle::stop, job_settings::sigterm):
// - drain: the sources stop producing, a final checkpoint is taken and every sink publishes what it
//   staged for it, then the job ends: exit code 0, job_result::stopped_at; the next run resumes from
//   that checkpoint (nothing is published twice or lost). A drain that cannot complete its checkpoint
//   (5 tries) stops as `now` does.
// - now: the tasks stop where they are (as SIGINT): exit code 130; the next run resumes from the
//   latest completed checkpoint.
enum class stop_mode { drain, now };

struct job_progress {
  std::chrono::nanoseconds elapsed{0};
  std::uint64_t records_in = 0;     // records taken by all non-source tasks
  std::uint64_t source_records = 0;  // records produced by the sources
  std::uint64_t records_written = 0;  // records the sinks took (staged or published)
  // How far the sources are through their inputs (bytes of files), over the sources that can tell;
  // input_total 0: none can.
  std::uint64_t input_done = 0;
  std::uint64_t input_total = 0;
  double backpressure = 0;           // share of partitions with no free buffer at the sample
  snapshot::checkpoint_id last_checkpoint = snapshot::no_checkpoint;
  std::chrono::nanoseconds last_checkpoint_duration{0};
  std::uint64_t last_checkpoint_bytes = 0;
  std::uint64_t checkpoints_completed = 0;
  std::uint64_t checkpoints_aborted = 0;
  // The oldest checkpoint in flight, and how long ago it was triggered (none: no checkpoint runs).
  snapshot::checkpoint_id running_checkpoint = snapshot::no_checkpoint;
  std::chrono::nanoseconds running_checkpoint_age{0};
};

struct job_settings {
  std::string checkpoint_dir;
  std::chrono::milliseconds checkpoint_interval{1000};
  snapshot::checkpoint_mode mode = snapshot::checkpoint_mode::aligned;
  std::chrono::milliseconds alignment_timeout{100};  // aligned_timeout
  // A checkpoint not acknowledged by every task this long after its trigger is aborted (expired),
  // and the next one is triggered.
  std::chrono::milliseconds checkpoint_timeout{600'000};
  // From one checkpoint's end to the next trigger at least this long (empty: half the interval), so
  // slow checkpoints leave the job time to make progress between them.
  std::optional<std::chrono::milliseconds> min_pause;
  // Checkpoints that may fail in a row (aborted: expired, declined, an I/O error; not those cancelled
  // because the job is stopping) before the job fails with the last one's reason; a completed one
  // resets the count. Empty: no limit (the job runs on, its output unpublished until one completes).
  std::optional<unsigned> tolerable_checkpoint_failures;
  // Completed checkpoints kept in checkpoint_dir (older ones are deleted); at least 1.
  std::size_t retained_checkpoints = 3;
  // Events kept in checkpoint_dir/history.jsonl (each start, each checkpoint's end: see
  // snapshot/checkpoint_history.hpp): past twice this many it is cut to the newest this many.
  // 0: no history file is written.
  std::size_t checkpoint_history_entries = 1000;
  // Every log line (runtime/log.hpp) goes here instead of stderr while the job runs. Logging is the
  // process's: the sink is installed when the job starts and removed when it ends.
  runtime::log::sink log_sink;
  // Channels between stages: local channels, or loopback TCP (one transport per executor).
  transport_kind transport = transport_kind::local;
  unsigned executors = 2;
  std::chrono::milliseconds flush_timeout{20};  // buffer timeout of every partition
  std::size_t floating_buffers = 8;
  // Network-memory segment (buffer) size: a power of two, 4 KiB to 32 KiB (a TCP frame's payload).
  // Smaller ones make more records span buffers (the simulation draws it).
  std::size_t segment_bytes = buffers::default_segment_bytes;
  // The most network memory (channel buffers) the job may map at start; the job's need follows from
  // its shape (job_plan.hpp: executors x the busiest executor's buffers x segment_bytes), and a job
  // that needs more is refused before it starts, with the numbers. 1 GiB, as Flink's default
  // network-memory maximum.
  std::size_t network_memory_limit_bytes = std::size_t{1} << 30;
  // The largest record any channel carries (a line read is one record; its encoding may add up to
  // 4 KiB of framing): larger ones fail the job, naming the task and the size. Records span buffers
  // (segment_bytes), in every checkpoint mode. 1 byte to 1 GiB.
  std::size_t max_record_bytes = std::size_t{16} << 20;
  // Signals are the host's unless it asks: with true, run_job blocks SIGINT and SIGTERM in its
  // threads and reads them itself (the sluice tool does): SIGINT stops the job at once, SIGTERM as
  // `sigterm` says; a second signal during a drain stops at once. Never under a simulation, nor for
  // a job started in the host's engine (job_handle.hpp: the host's signals are the host's).
  bool handle_signals = false;
  stop_mode sigterm = stop_mode::now;
  // The callbacks below (on_*) run on a host thread of the job, one at a time and in the order of
  // their events, never on an executor: one that blocks (a paused terminal, a full sd_notify socket)
  // delays the next callbacks, not the job (runtime/host_calls.hpp). run_job returns once the last
  // has returned. Under a simulation they run inline, on the simulation's thread.
  // About every progress_interval; a host that does not keep up sees only the newest report.
  std::function<void(const job_progress&)> on_progress;
  std::chrono::milliseconds progress_interval{250};
  // Once, when every task is restored and its channels are
  // connected, just before the tasks run: with the checkpoint the job resumed from, if any. (Across
  // workers: each attempt of this worker.)
  std::function<void(std::optional<snapshot::checkpoint_id> resumed_from)> on_ready;
  // Once, when a stop asked for (stop_mode: job_handle::stop,
  // job_settings::stop/drain, a signal) begins; not when the input ends or the job fails. (A drain
  // escalated to a stop now is not reported again.)
  std::function<void(stop_mode)> on_stopping;
  // As each checkpoint ends (completed or aborted); at most 1024 wait (more are dropped, logged).
  std::function<void(const snapshot::checkpoint_stats&)> on_checkpoint;
  // "HOST:PORT" ("127.0.0.1:9464", "[::1]:9464", ":9464" for every IPv4 interface; port 0: the
  // kernel chooses): the job serves Prometheus metrics at http://HOST:PORT/metrics (text format
  // 0.0.4; docs/operations.md, "Metrics") from its first executor while its tasks run. Empty: no endpoint. An
  // address that does not parse is std::invalid_argument; one that cannot be bound (in use, not
  // this host's) refuses the job before any task is made (exit code 2, the message names it).
  std::string metrics_address;
  // Once the metrics endpoint listens, with its port (the one
  // the kernel chose for port 0), just before the tasks run.
  std::function<void(std::uint16_t port)> on_metrics_listening;
  // A stop request (from any thread, or from on_progress/on_checkpoint) stops the job at once, as
  // SIGINT (or SIGTERM with stop_mode::now) does: no final checkpoint, exit code 130, and the next
  // run resumes from the latest checkpoint.
  std::stop_token stop;
  // A stop request here stops the job with a final checkpoint (stop_mode::drain): exit code 0,
  // job_result::stopped_at.
  std::stop_token drain;
  // Runs the job on a simulated machine (sim/world.hpp): every executor on the calling thread, and
  // every file, socket and clock the job uses is the simulation's. Signals are not handled then.
  runtime::simulation* simulation = nullptr;
};

struct job_result {
  int exit_code = 0;
  std::string message;  // what failed; with exit code 0, empty or a note ("stopped by request")
  std::optional<snapshot::checkpoint_id> resumed_from;
  // Stopped by a drain (stop_mode::drain): the checkpoint it took, which every sink published; the
  // next run resumes from it. Empty when the job finished its input, failed or stopped at once.
  std::optional<snapshot::checkpoint_id> stopped_at;
  job_progress final;
  // Network-memory segments not back in their pools once everything was torn down: always 0 unless
  // a buffer leaked (the simulation checks it).
  std::size_t leaked_segments = 0;
  // Violations the job's buffer pools counted (a buffer reference released twice, a segment recycled
  // into a pool that did not lend it or twice): always 0 unless a buffer was recycled more than once
  // (the simulation checks it).
  std::uint64_t buffer_violations = 0;
  // The first input gate whose credit identity (buffers/input_gate.hpp) did not hold once its task
  // had ended, and why: always empty unless credit was miscounted (the simulation checks it).
  std::string credit_violation;
};

// Throws std::invalid_argument for a graph that cannot run (a stage without a tail, settings out of
// range); everything that goes wrong while running is in the result.
job_result run_job(job_builder& job, job_settings settings);

}  // namespace sluice::dataflow
