// run_job: places a job's tasks on an engine, wires their channels, runs the coordinator, and ends
// the job with a final checkpoint (job_runner.hpp).
#include "settings_check.hpp"

#include <sluice/dataflow/job_handle.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/core.h>

#include <csignal>
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
  // From before the engine starts (its own start-up lines) to after it stopped.
  const rt::log::scoped_sink logs(std::move(settings.log_sink));
  settings.log_sink = nullptr;
  // Signals: SIGINT stops at once, SIGTERM as settings.sigterm says; a second one during a drain stops
  // at once. (The engine calls this on executor 0, where `handle` is set before any signal is read.)
  job_handle handle;
  bool draining = false;
  const stop_mode on_sigterm = settings.sigterm;
  auto on_signal = [&handle, &draining, on_sigterm](int signo) {
    if (signo != SIGTERM || on_sigterm != stop_mode::drain || draining) return true;
    draining = true;
    rt::log::warn("received SIGTERM; stopping with a final checkpoint (a second signal stops at once)");
    handle.stop(stop_mode::drain);
    return false;
  };
  job_result result;
  {
    rt::engine eng({.executors = settings.executors,
                    .handle_signals = settings.handle_signals,
                    .on_signal = on_signal,
                    .simulation = settings.simulation});
    const bool asked_stop = settings.stop.stop_possible();
    const std::stop_token stop = settings.stop;
    handle = detail::start_job_on(eng, job, std::move(settings));
    result = eng.block_on(handle.wait());
    if (eng.stop_signal() != 0) {
      result.exit_code = 130;
      result.message = fmt::format("stopped by signal {}", eng.stop_signal());
    } else if (asked_stop && stop.stop_requested() && result.exit_code == 0 && !result.stopped_at &&
               result.message.empty()) {
      result.exit_code = 130;
      result.message = "stopped by request";
    }
    eng.stop();
  }
  return result;
}

}  // namespace sluice::dataflow
