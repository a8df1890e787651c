#pragma once
// job_metrics: a running job's HTTP endpoint (job_settings::metrics_address), served with
// io::http_server on the job's first executor:
//   GET /metrics   the Prometheus text (below), sampled per scrape (job_samples.hpp): every task on
//                  its own executor, every executor on itself, and the checkpoints it has heard of
//                  (checkpoint_ended, on the first executor);
//   GET /          the status page (status_page.hpp), and GET /api/... its JSON (status_api.hpp).
// HEAD too; other paths: 404 naming these; other methods: 405.
//
// Lifetime, driven by the runner: bind() before any task is made (a refusal fails the job with exit
// code 2), start() once every task is wired (logs "status page on http://HOST:PORT/, metrics on
// http://HOST:PORT/metrics" and calls
// job_settings::on_metrics_listening), stop() once the tasks ended and before any is destroyed. The
// task slots, engine, memory and coordinator given to bind() must outlive stop().
//
// The series (prefix sluice_, labels sluice_job -- never "job" or "instance", which are
// Prometheus' own target labels -- and task / executor / pool / reason where they apply; base units
// in the names: seconds, bytes): per task records and bytes in and out, seconds backpressured and
// idle (task_meters.hpp), watermark (seconds), buffers in use per pool, credits outstanding; per
// executor network buffers in use, busy ratio, idle seconds, backend submissions, operations in
// flight, inbox depth;
// checkpoints completed and aborted by reason, their duration and alignment histograms and the last
// one's state bytes; what the run resumed from. Then the standard process_* series
// (process_metrics.hpp). The endpoint ends with the job: a scrape after the job's end finds nothing
// (Prometheus keeps the last scrape's values). docs/operations.md lists them.

#include "job_samples.hpp"
#include "status_api.hpp"
#include "task_slot.hpp"

#include <sluice/buffers/segment.hpp>
#include <sluice/io/address.hpp>
#include <sluice/io/http_server.hpp>
#include <sluice/io/prometheus_text.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dataflow::detail {

// "HOST:PORT" as job_settings::metrics_address takes it (":PORT": every IPv4 interface); the error
// says what is wrong with it.
io::result<io::address> parse_metrics_address(std::string_view text);

class job_metrics {
 public:
  using sources = endpoint_sources;

  // Binds the endpoint (on the job's first executor). The error names the address:
  // "metrics endpoint: listen on 127.0.0.1:9464: Address already in use".
  static io::result<std::unique_ptr<job_metrics>> bind(std::string_view address, sources from);
  ~job_metrics();

  // On the first executor, as each checkpoint ends.
  void checkpoint_ended(const snapshot::checkpoint_stats& stats);
  // Serves from now on (on the first executor, which must run until stop()).
  void start(std::optional<snapshot::checkpoint_id> resumed_from, std::chrono::nanoseconds restore_duration,
             const std::function<void(std::uint16_t)>& listening);
  runtime::task<void> stop();

  std::uint16_t port() const noexcept;
  // The text of one scrape.
  runtime::task<std::string> scrape();

 private:
  job_metrics(std::unique_ptr<io::http_server> server, sources from);
  static runtime::task<io::http_response> handle(job_metrics* self, io::http_request request);
  runtime::task<void> serve();
  void write_tasks(io::prometheus_text& out, const std::vector<task_sample>& tasks) const;
  void write_executors(io::prometheus_text& out, const std::vector<executor_sample>& executors);
  void write_checkpoints(io::prometheus_text& out) const;

  std::unique_ptr<io::http_server> server_;
  sources from_;
  status_api status_;  // the status page's JSON views; reads from_
  runtime::scope scope_;
  bool started_ = false;
  std::optional<snapshot::checkpoint_id> resumed_from_;
  std::chrono::steady_clock::time_point started_at_{};
  // Checkpoints, as they ended.
  std::uint64_t completed_ = 0;
  std::array<std::uint64_t, 8> aborted_{};  // by abort_reason
  io::histogram_data duration_;
  io::histogram_data alignment_;
  io::histogram_data sync_;
  std::optional<snapshot::checkpoint_stats> last_completed_;
  std::vector<rate_meter> busy_;  // per executor: its idle seconds per second
};

}  // namespace sluice::dataflow::detail
