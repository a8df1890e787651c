// See job_worker.hpp.

#include "job_directories.hpp"
#include "runner.hpp"
#include "settings_check.hpp"

#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/job_worker.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/wait_report.hpp>

#include <optional>

namespace sluice::dataflow {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;

struct job_worker::impl {
  job_builder* job = nullptr;
  job_settings settings;
  unsigned workers = 1;
  unsigned worker = 0;
  job_fingerprint identity;
  std::optional<job_plan> plan;
  std::optional<detail::job_directories> dirs;
};

job_worker::job_worker(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
job_worker::~job_worker() = default;

const job_fingerprint& job_worker::identity() const noexcept { return impl_->identity; }
const job_settings& job_worker::settings() const noexcept { return impl_->settings; }

std::variant<std::unique_ptr<job_worker>, job_result> job_worker::prepare(job_builder& job, job_settings settings,
                                                                          unsigned workers, unsigned worker) {
  detail::check_settings(settings);
  if (worker >= workers) throw std::invalid_argument("job worker: the worker index must be below the worker count");
  auto state = std::make_unique<impl>();
  state->job = &job;
  state->workers = workers;
  state->worker = worker;
  state->plan.emplace(job_plan::make(job, plan_shape{.workers = workers,
                                                     .executors = settings.executors,
                                                     .transport = settings.transport,
                                                     .floating_buffers = settings.floating_buffers}));
  detail::check_network_memory(*state->plan, settings, worker);
  try {
    state->identity = fingerprint_job(job);
  } catch (const job_refused& e) {
    return job_result{.exit_code = e.exit_code(), .message = e.what(), .resumed_from = {}, .final = {}};
  }
  io::result<detail::job_directories> dirs =
      detail::job_directories::lock(job.name(), settings.checkpoint_dir, job.output_dirs(), worker);
  if (!dirs) return job_result{.exit_code = 2, .message = dirs.error().message()};
  state->dirs.emplace(std::move(dirs).value());
  settings.handle_signals = false;  // the engine is the caller's
  state->settings = std::move(settings);
  return std::unique_ptr<job_worker>(new job_worker(std::move(state)));
}

namespace {
rt::task<void> pass() { co_await rt::yield(); }
// Lets messages already posted to every executor of `eng` arrive (FIFO per sender), twice over.
rt::task<void> settle(rt::engine& eng) {
  for (int round = 0; round < 2; ++round) {
    for (std::size_t e = 0; e < eng.size(); ++e) co_await rt::run_on(&eng.at(e), pass());
  }
}
}  // namespace

rt::task<job_result> job_worker::run_attempt(rt::engine& eng, cluster_link& link) {
  impl& s = *impl_;
  const std::size_t segment_bytes = s.settings.segment_bytes;
  const std::size_t per_executor = s.plan->segments_per_executor(s.worker);
  auto memory = std::make_unique<bf::network_memory>(per_executor * eng.size() * segment_bytes, segment_bytes, eng.size());
  auto r = std::make_unique<detail::runner>(*s.job, s.settings, *s.plan, eng, *memory, s.identity, &link);
  r->directories = &*s.dirs;
  job_result result;
  {
    const rt::wait_report_scope reporting(*r);
    result = co_await r->run();
  }
  co_await settle(eng);
  r.reset();
  for (std::size_t e = 0; e < memory->executors(); ++e) {
    result.leaked_segments += memory->pool(e).total_segments() - memory->pool(e).free_segments();
  }
  co_return result;
}

}  // namespace sluice::dataflow
