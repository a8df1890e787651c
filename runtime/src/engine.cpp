// The engine: executor threads, signals and orderly shutdown (see engine.hpp).
//
// Shutdown runs in phases so that no executor is destroyed while another may still post to it:
// every thread first runs until stopped with no detached tasks left; then all keep serving their
// inboxes while each drains and cancels what it still has in flight; then each shuts its ring down
// and keeps serving its inbox until all have. The executor objects are destroyed only after every
// thread has been joined, so a late post never lands in freed memory.

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/cpus.hpp>
#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/offload.hpp>

#include "helper_thread.hpp"
#include "stall_detector.hpp"
#include "thread_beat.hpp"

#include <fmt/core.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace sluice::runtime {

namespace {
struct shutdown_barrier {
  // Threads taking part: lowered if a later executor fails to start.
  std::atomic<std::size_t> expected{0};
  std::atomic<std::size_t> finished_run{0};
  std::atomic<std::size_t> finished_drain{0};
  std::atomic<std::size_t> finished_shutdown{0};

  // Serves the inbox (never blocking: the barrier is not a message) until `counter` reaches all.
  void wait(std::atomic<std::size_t>& counter, executor& ex) const {
    while (counter.load() < expected.load()) {
      ex.turn(false);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
};
}  // namespace

engine::engine(engine_options options)
    : options_(options), blocking_(std::make_unique<blocking_pool>(options_.blocking_threads)) {
  unsigned n = options_.executors;
  if (n == 0) n = available_cpus();  // the affinity mask's CPUs (taskset, a cgroup cpuset)
  if (options_.simulation != nullptr) {
    start_simulated(n);
    return;
  }

  if (options_.handle_signals) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    // Blocked here, so every executor thread inherits the mask; the signalfd reads them instead.
    pthread_sigmask(SIG_BLOCK, &mask, &previous_mask_);
    signal_fd_ = ::signalfd(-1, &mask, SFD_CLOEXEC);
    if (signal_fd_ < 0) throw std::system_error(errno, std::generic_category(), "engine: signalfd");
  }

  auto* barrier = new shutdown_barrier{};
  barrier->expected = n;
  barrier_ = barrier;
  executors_.resize(n, nullptr);
  owned_.resize(n);
  beats_.resize(n, nullptr);
  // Whatever fails on the way (a thread that cannot start: no address space for its stack), the
  // threads already running are stopped and joined before the exception leaves: a joinable
  // std::thread destroyed by the unwinding would call std::terminate.
  for (unsigned i = 0; i < n; ++i) {
    std::promise<executor*> ready;
    auto published = ready.get_future();
    try {
      threads_.emplace_back([this, i, r = std::move(ready)]() mutable { thread_main(i, std::move(r)); });
    } catch (const std::system_error& e) {
      executors_.resize(i);
      barrier->expected = i;  // the threads already running must not wait for the missing ones
      stop();
      throw detail::described_error(e.code(), detail::thread_start_failure(fmt::format("executor {}'s thread", i),
                                                                           e.code().value()));
    } catch (...) {
      executors_.resize(i);
      barrier->expected = i;
      stop();
      throw;
    }
    try {
      executors_[i] = published.get();
    } catch (...) {
      threads_.back().join();
      threads_.pop_back();
      executors_.resize(i);
      barrier->expected = i;
      stop();
      throw;
    }
  }
  try {
    if (signal_fd_ >= 0) spawn_on(at(0), watch_signals());
    if (options_.stalls.threshold.count() > 0) {
      detector_ = std::make_unique<stall_detector>(beats_, options_.stalls);
    }
  } catch (...) {
    stop();
    throw;
  }
}

namespace {
// A signal that came once the watcher had stopped reading (a second SIGTERM as a drain ended) was
// the engine's to handle, and still waits: unblocked, it would be delivered with its default action
// and kill the process after the job had ended. It is read here instead, and logged.
void take_late_signals(int signal_fd) noexcept {
  const int flags = ::fcntl(signal_fd, F_GETFL);
  if (flags < 0 || ::fcntl(signal_fd, F_SETFL, flags | O_NONBLOCK) < 0) return;
  for (;;) {
    signalfd_siginfo info{};
    const ssize_t n = ::read(signal_fd, &info, sizeof info);
    if (n != static_cast<ssize_t>(sizeof info)) return;  // (EAGAIN: none left)
    try {
      log::info("{} came as the engine ended: taken, there is nothing left to stop",
                info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
    } catch (...) {  // (the line only)
    }
  }
}

}  // namespace

engine::~engine() { stop(); }

std::uint64_t engine::stalls(std::size_t index) const noexcept { return detector_ ? detector_->stalls(index) : 0; }

void engine::thread_main(std::size_t index, std::promise<executor*> ready) {
  auto* barrier = static_cast<shutdown_barrier*>(barrier_);
  std::unique_ptr<executor>& ex = owned_[index];
  try {
    if (options_.pin_cpus) {
      // The index-th CPU of those the process may run on (not of the machine's: a CPU outside the
      // affinity mask, or a cgroup cpuset, cannot be pinned to).
      const std::vector<int> cpus = allowed_cpus();
      const int cpu = cpus[index % cpus.size()];
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      if (int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
        log::warn("executor {}: cannot pin to CPU {}: {}", index, cpu, std::strerror(rc));
      }
    }
    executor_options eo;
    eo.id = static_cast<int>(index);
    eo.blocking = blocking_.get();
    eo.uring = options_.uring;
    eo.batch_limit = options_.batch_limit;
    ex = std::make_unique<executor>(std::move(eo));
    beats_[index] = &detail::this_thread_beat();
  } catch (...) {
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value(ex.get());
  ex->run();

  barrier->finished_run.fetch_add(1);
  barrier->wait(barrier->finished_run, *ex);
  ex->drain();
  barrier->finished_drain.fetch_add(1);
  barrier->wait(barrier->finished_drain, *ex);
  ex->shutdown();  // on this thread: the ring is single-issuer
  barrier->finished_shutdown.fetch_add(1);
  barrier->wait(barrier->finished_shutdown, *ex);
  detail::this_thread_beat().park();  // no more turns: the stall detector stops watching
  detail::fold_thread_frames();
}

task<void> engine::watch_signals() {
  for (;;) {
    signalfd_siginfo info{};
    io_op op;
    op.code = op_code::read;
    op.fd = signal_fd_;
    op.buf = &info;
    op.len = sizeof info;
    op.offset = static_cast<std::uint64_t>(-1);
    op.waits = true;  // until a signal comes: a wait, not a prompt read (admission.hpp)
    const std::int32_t rc = co_await submit_op(op);
    if (rc != static_cast<std::int32_t>(sizeof info)) {
      if (rc != -ECANCELED) log::error("reading signals failed: {}", std::strerror(-rc));
      co_return;
    }
    const int signo = static_cast<int>(info.ssi_signo);
    if (options_.on_signal && !options_.on_signal(signo)) continue;  // handled: watch on
    stop_signal_.store(signo);
    log::warn("received {}; stopping", signo == SIGINT ? "SIGINT" : "SIGTERM");
    request_stop();
    co_return;
  }
}

void engine::request_stop() noexcept {
  if (stop_requested_.exchange(true)) return;
  for (executor* ex : executors_) {
    if (ex != nullptr) ex->request_stop();
  }
}

void engine::start_simulated(unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    executor_options eo;
    eo.id = static_cast<int>(i);
    eo.batch_limit = options_.batch_limit;
    eo.spin_before_sleep = std::chrono::microseconds(0);
    eo.backend = options_.simulation->make_backend(static_cast<int>(i));
    eo.order = options_.simulation;
    owned_.push_back(std::make_unique<executor>(std::move(eo)));
    executors_.push_back(owned_.back().get());
  }
}

void engine::wait(completion& done) {
  if (options_.simulation == nullptr) {
    done.promise.get_future().wait();
    return;
  }
  options_.simulation->run(executors_, [](void* flag) noexcept { return *static_cast<bool*>(flag); }, &done.flag);
}

// The same phases as the threads' (see the top), with the simulation running the turns.
void engine::stop_simulated() {
  request_stop();
  options_.simulation->run(
      executors_,
      [](void* self) noexcept {
        for (executor* ex : static_cast<engine*>(self)->executors_) {
          if (!ex->stop_requested() || ex->detached_tasks() > 0) return false;
        }
        return true;
      },
      this);
  options_.simulation->run(
      executors_,
      [](void* self) noexcept {
        for (executor* ex : static_cast<engine*>(self)->executors_) {
          if (!ex->quiescent()) return false;
        }
        return true;
      },
      this);
  for (executor* ex : executors_) ex->shutdown();
  executors_.clear();
  owned_.clear();
}

void engine::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (options_.simulation != nullptr) {
    stop_simulated();
    return;
  }
  request_stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (detector_) detector_->stop();  // before the executors go; its counts stay readable
  executors_.clear();
  owned_.clear();  // every thread has ended: nothing can post any more
  blocking_->shutdown();  // idle: every offloaded call was awaited by a task that has ended
  delete static_cast<shutdown_barrier*>(barrier_);
  barrier_ = nullptr;
  if (signal_fd_ >= 0) {
    take_late_signals(signal_fd_);
    ::close(signal_fd_);
    signal_fd_ = -1;
    pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  }
}

}  // namespace sluice::runtime
