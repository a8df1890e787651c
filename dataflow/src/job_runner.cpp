// run_job: places a job's tasks on an engine, wires their channels, runs the coordinator, and ends
// the job with a final checkpoint (job_runner.hpp).
#include "job_directories.hpp"
#include "runner.hpp"
#include "settings_check.hpp"

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/wait_report.hpp>

#include <fmt/core.h>

#include <memory>
#include <optional>
#include <stop_token>

namespace sluice::dataflow {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

job_result run_job(job_builder& job, job_settings settings) {
  // Under a simulation, even the start-up's file reads and locks are the simulated machine's.
  std::optional<rt::system_scope> simulated;
  if (settings.simulation != nullptr) {
    simulated.emplace(settings.simulation->kernel());
    settings.handle_signals = false;
  }
  detail::check_settings(settings);
  const rt::log::scoped_sink logs(settings.log_sink);
  const job_plan plan = job_plan::make(job, plan_shape{.workers = 1,
                                                       .executors = settings.executors,
                                                       .transport = settings.transport,
                                                       .floating_buffers = settings.floating_buffers});
  // The job's identity, before any executor runs (it reads every input, blocking).
  job_fingerprint identity;
  try {
    identity = fingerprint_job(job);
  } catch (const job_refused& e) {
    return job_result{.exit_code = e.exit_code(), .message = e.what(), .resumed_from = {}, .final = {}};
  }
  // Start-up, before any executor runs: the checkpoint and output directories, made and locked until
  // this call returns; a refusal is exit code 2 (job_directories.hpp).
  io::result<detail::job_directories> dirs =
      detail::job_directories::lock(job.name(), settings.checkpoint_dir, job.output_dirs());
  if (!dirs) return job_result{.exit_code = 2, .message = dirs.error().message()};
  const std::size_t segment_bytes = settings.segment_bytes;
  const std::size_t per_executor = plan.segments_per_executor();
  bf::network_memory memory(per_executor * settings.executors * segment_bytes, segment_bytes, settings.executors);

  job_result result;
  {
    rt::engine eng({.executors = settings.executors,
                    .handle_signals = settings.handle_signals,
                    .simulation = settings.simulation});
    const std::stop_token stop = settings.stop;
    auto r = std::make_unique<detail::runner>(job, std::move(settings), plan, eng, memory, std::move(identity));
    const rt::wait_report_scope reporting(*r);
    r->directories = &dirs.value();
    {
      std::stop_callback on_stop(stop, [&eng] { eng.request_stop(); });
      result = eng.block_on(r->run());
    }
    if (eng.stop_signal() != 0) {
      result.exit_code = 130;
      result.message = fmt::format("stopped by signal {}", eng.stop_signal());
    } else if (stop.stop_requested() && result.exit_code == 0 && result.message.empty()) {
      result.exit_code = 130;
      result.message = "stopped by request";
    }
    eng.stop();
    r.reset();  // after every executor stopped: nothing is posted to its parts any more
  }
  for (std::size_t e = 0; e < memory.executors(); ++e) {
    result.leaked_segments += memory.pool(e).total_segments() - memory.pool(e).free_segments();
  }
  return result;
}

}  // namespace sluice::dataflow
