#pragma once
// service_notify: the sluice tool as a systemd service (Type=notify; examples/systemd/), through
// libsystemd's sd_notify. Everything is a no-op unless NOTIFY_SOCKET is set (systemd sets it for a
// Type=notify unit; a test may point it at a socket of its own).
//
// - READY=1 once the job is restored, wired and about to run (job_settings::on_ready), with
//   STATUS= saying whether it resumed and from which checkpoint.
// - STATUS= with the progress line's text, at most once a second.
// - WATCHDOG=1, when systemd asks for it (WatchdogSec=, seen through WATCHDOG_USEC and
//   WATCHDOG_PID), at least twice per watchdog period, and only from a progress report: a report
//   comes only after every executor that runs a task answered the runner's probe (runner.cpp
//   progress()), so an executor that is stuck (an operator that never returns, a blocking call)
//   stops the pings and systemd restarts the service.
// - STOPPING=1 when a stop begins (job_settings::on_stopping), and while it lasts, with each
//   progress report, EXTEND_TIMEOUT_USEC= so that a final checkpoint that makes progress is not cut
//   short by TimeoutStopSec=.
// Calls come from the job's host thread only (its callbacks: job_settings), so no lock is needed, and
// an sd_notify that blocks (a busy PID 1 whose socket queue is full) blocks that thread, not the job.

#include <sluice/dataflow/job_runner.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace sluice::apps {

class service_notify {
 public:
  service_notify();
  // NOTIFY_SOCKET is set (and the tool was built with libsystemd).
  bool active() const noexcept { return active_; }
  // The watchdog period systemd asked for (none: no pings).
  std::optional<std::chrono::microseconds> watchdog() const noexcept { return watchdog_; }

  void ready(std::optional<snapshot::checkpoint_id> resumed_from);
  void progress(const std::string& status, std::chrono::steady_clock::time_point now);
  void stopping(dataflow::stop_mode mode);

 private:
  void send(const std::string& message);

  bool active_ = false;
  std::optional<std::chrono::microseconds> watchdog_;
  bool stopping_ = false;
  std::uint64_t dropped_ = 0;  // notifications the full socket did not take
  std::chrono::steady_clock::time_point last_status_{};
  std::chrono::steady_clock::time_point last_ping_{};
};

}  // namespace sluice::apps
