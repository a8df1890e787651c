// A job in an engine it does not own (job_handle.hpp), and the start-up every run of a job shares
// (run_job, job_runner.cpp, runs through it too, in an engine of its own).
//
// Threads: everything of the job's state is touched on the engine's executor 0 only (the job's
// control coroutine, the runner, ready/wait/stats through run_on), except `joined`, a promise the
// control coroutine fulfils once, for join() off the engine. stop() from anywhere posts to
// executor 0.

#include "job_directories.hpp"
#include "runner.hpp"
#include "settings_check.hpp"

#include <sluice/dataflow/job_handle.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/offload.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/wait_report.hpp>

#include <fmt/core.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <future>
#include <new>
#include <stdexcept>
#include <stop_token>

namespace sluice::dataflow {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

namespace detail {

struct job_state final : rt::wait_reporter {
  job_state(rt::engine& e, job_builder& j, job_settings s, job_plan p)
      : eng(e), job(j), settings(std::move(s)), plan(std::move(p)) {}
  rt::engine& eng;
  job_builder& job;
  job_settings settings;
  const job_plan plan;
  runner* running = nullptr;            // while the runner exists
  std::optional<stop_mode> pending;      // asked for before the runner existed
  std::optional<job_ready> ready_info;
  rt::event ready_or_ended;
  bool ended = false;
  job_result result;
  std::exception_ptr failure;  // what run_parts threw
  rt::event ended_event;
  std::promise<job_result> joined;
  std::shared_future<job_result> joined_future = joined.get_future().share();
  // settings.stop and settings.drain, registered while the job runs
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
  std::optional<std::stop_callback<std::function<void()>>> on_drain;

  void report_waits(std::string& out) const override {
    if (running != nullptr) running->report_waits(out);
  }
  // On executor 0.
  void apply(stop_mode mode) {
    if (ended) return;
    if (running != nullptr) {
      running->request_stop(mode);
    } else if (!pending || mode == stop_mode::now) {
      pending = mode;
    }
  }
};

namespace {

// The blocking start-up work, on the engine's blocking-work pool (inline under a simulation).
struct start_up {
  job_fingerprint identity;
  std::optional<job_result> refused;
  std::optional<io::result<job_directories>> dirs;
};

void prepare(job_state& st, start_up& out) {
  try {
    out.identity = fingerprint_job(st.job);  // reads every input
  } catch (const job_refused& e) {
    out.refused = job_result{.exit_code = e.exit_code(), .message = e.what()};
    return;
  }
  // The checkpoint and output directories, made and locked until the job ends; a refusal is exit
  // code 2 (job_directories.hpp).
  out.dirs.emplace(job_directories::lock(st.job.name(), st.settings.checkpoint_dir, st.job.output_dirs()));
  if (!*out.dirs) out.refused = job_result{.exit_code = 2, .message = out.dirs->error().message()};
}

rt::task<void> yield_here() {
  co_await rt::yield();
  co_await rt::yield();
}

// One line on stderr, written without allocating, then the process ends with exit code 1.
[[noreturn]] void end_process_unwound(std::exception_ptr thrown) noexcept {
  const char* what = "an exception that is not a std::exception";
  bool memory = false;
  try {
    std::rethrow_exception(std::move(thrown));
  } catch (const std::bad_alloc& e) {
    what = e.what();
    memory = true;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  char limit[96] = "";
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    std::snprintf(limit, sizeof limit, "; the address space is limited to %llu MiB (ulimit -v)",
                  static_cast<unsigned long long>(as.rlim_cur >> 20));
  }
  char line[640];
  const int n = std::snprintf(line, sizeof line,
                              "sluice: fatal: the job runner unwound while its tasks still exist: %s%s%s%s; the "
                              "process ends (exit code 1), and a rerun resumes from the newest checkpoint\n",
                              memory ? "out of memory (" : "", what, memory ? ")" : "", limit);
  if (n > 0) (void)!::write(2, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
  ::_exit(1);
}

rt::task<job_result> run_parts(job_state& st) {
  const job_plan& plan = st.plan;
  start_up up;
  auto work = [&st, &up] { prepare(st, up); };
  co_await rt::offload(work);
  if (up.refused) co_return std::move(*up.refused);
  if (st.pending == stop_mode::now) co_return job_result{.exit_code = 130, .message = "stopped by request"};
  const std::size_t segment_bytes = st.settings.segment_bytes;
  bf::network_memory memory(plan.budget(segment_bytes).total_bytes(), segment_bytes, st.settings.executors);
  auto r = std::make_unique<runner>(st.job, st.settings, plan, st.eng, memory, std::move(up.identity));
  r->directories = &up.dirs->value();
  // On executor 0 once restored and wired (the host's on_ready goes through the runner's host lane).
  job_state* raw = &st;
  r->on_ready = [raw](std::optional<ss::checkpoint_id> from) {
    raw->ready_info = job_ready{from};
    raw->ready_or_ended.set();
  };
  st.running = r.get();
  if (st.pending) r->request_stop(*st.pending);
  job_result result;
  try {
    result = co_await r->run();
  } catch (...) {
    // What escaped the runner past its teardown (out of memory where nothing could take it as a
    // task's failure): tasks, pools or channels may still be in use on other executors, and
    // destroying the runner would free them under their feet. The process ends as a crash would;
    // the rerun resumes from the newest checkpoint, as after kill -9.
    if (r->owns_parts()) end_process_unwound(std::current_exception());
    throw;
  }
  st.running = nullptr;
  // What is still on its way to the runner or the pools (a task's last post, a buffer coming home)
  // lands before they go.
  for (unsigned e = 0; e < st.settings.executors; ++e) co_await rt::run_on(&st.eng.at(e), yield_here());
  r.reset();
  for (std::size_t e = 0; e < memory.executors(); ++e) {
    result.leaked_segments += memory.pool(e).total_segments() - memory.pool(e).free_segments();
  }
  co_return result;
}

rt::task<void> control(std::shared_ptr<job_state> st) {
  job_result result;
  {
    const rt::log::scoped_sink logs(st->settings.log_sink);
    const rt::wait_report_scope reporting(*st);  // (the simulation's hang report: this thread's)
    try {
      result = co_await run_parts(*st);
    } catch (...) {
      // A graph that cannot run (a stage's build refusing, std::invalid_argument): wait() and
      // join() rethrow it, as run_job does.
      st->failure = std::current_exception();
    }
  }
  st->ended = true;
  st->result = result;
  st->ready_or_ended.set();
  st->ended_event.set();
  if (st->failure) {
    st->joined.set_exception(st->failure);
  } else {
    st->joined.set_value(std::move(result));
  }
  // (The stop callbacks go last: one running now on another thread is waited for, and posts only.)
  st->on_stop.reset();
  st->on_drain.reset();
}

rt::task<std::optional<job_ready>> await_ready(job_state* st) {
  const bool woke = co_await st->ready_or_ended.wait();
  if (!woke || !st->ready_info) co_return std::nullopt;
  co_return st->ready_info;
}

rt::task<void> await_end(job_state* st) {
  while (!st->ended) co_await st->ended_event.wait();
}

rt::task<job_result> result_of(job_state* st) {
  // Under a token that never stops: the job's end is what this waits for.
  co_await rt::with_stop_token(await_end(st), std::stop_token{});
  if (st->failure) std::rethrow_exception(st->failure);
  co_return st->result;
}

rt::task<job_progress> sample(job_state* st) {
  if (st->running != nullptr) co_return co_await st->running->sample_progress();
  co_return st->result.final;
}

}  // namespace

job_handle start_job_on(rt::engine& eng, job_builder& job, job_settings settings) {
  check_settings(settings);
  if (settings.executors > eng.size()) {
    throw std::invalid_argument(fmt::format("job_settings::executors is {}, but the engine has {} executors",
                                            settings.executors, eng.size()));
  }
  // A graph that cannot run throws here, to the caller.
  job_plan plan = job_plan::make(job, plan_shape{.workers = 1,
                                                 .executors = settings.executors,
                                                 .transport = settings.transport,
                                                 .floating_buffers = settings.floating_buffers});
  check_network_memory(plan, settings);
  auto st = std::make_shared<job_state>(eng, job, std::move(settings), std::move(plan));
  job_handle handle(st);
  const std::stop_token stop = st->settings.stop;
  const std::stop_token drain = st->settings.drain;
  st->on_stop.emplace(stop, std::function<void()>([handle] { handle.stop(stop_mode::now); }));
  st->on_drain.emplace(drain, std::function<void()>([handle] { handle.stop(stop_mode::drain); }));
  rt::spawn_on(eng.at(0), control(st));
  return handle;
}

}  // namespace detail

void job_handle::stop(stop_mode mode) const {
  if (!state_) return;
  std::shared_ptr<detail::job_state> st = state_;
  state_->eng.at(0).post([st, mode] { st->apply(mode); });
}

rt::task<std::optional<job_ready>> job_handle::ready() const {
  std::shared_ptr<detail::job_state> st = state_;  // alive across the await
  if (!st) co_return std::nullopt;
  co_return co_await rt::run_on(&st->eng.at(0), detail::await_ready(st.get()));
}

rt::task<job_result> job_handle::wait() const {
  std::shared_ptr<detail::job_state> st = state_;
  if (!st) co_return job_result{.exit_code = 2, .message = "no job"};
  co_return co_await rt::run_on(&st->eng.at(0), detail::result_of(st.get()));
}

rt::task<job_progress> job_handle::stats() const {
  std::shared_ptr<detail::job_state> st = state_;
  if (!st) co_return job_progress{};
  co_return co_await rt::run_on(&st->eng.at(0), detail::sample(st.get()));
}

job_result job_handle::join() const {
  if (!state_) return job_result{.exit_code = 2, .message = "no job"};
  return state_->joined_future.get();
}

job_handle start_job(rt::engine& eng, job_builder& job, job_settings settings) {
  if (settings.handle_signals) {
    throw std::invalid_argument("job_settings::handle_signals: a job in the host's engine leaves signals to the host");
  }
  if (settings.simulation != nullptr) {
    throw std::invalid_argument("job_settings::simulation: a simulated job runs through run_job");
  }
  return detail::start_job_on(eng, job, std::move(settings));
}

rt::task<job_result> run_job_in(rt::engine& eng, job_builder& job, job_settings settings) {
  job_handle handle = start_job(eng, job, std::move(settings));
  co_return co_await handle.wait();
}

}  // namespace sluice::dataflow
