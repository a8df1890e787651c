#pragma once
// engine: N executors, each on its own thread with its own io_uring.
//
// - Default: one executor per CPU; optional pinning of executor i to CPU i.
// - `block_on(t)` runs t on executor 0 and blocks the calling thread until it finishes.
// - SIGINT/SIGTERM (when `handle_signals`) are blocked in every thread and read through a signalfd
//   on executor 0's ring; the first one asks every executor to stop (tasks see their stop token),
//   unless `on_signal` handles it.
// - Destruction stops every executor, waits until their detached tasks and in-flight operations
//   are done, and joins the threads: no frame and no descriptor is left behind.
// - The engine owns the pool its executors offload blocking calls to (offload.hpp); stop() joins
//   it after the executors, whose drain waits for every offloaded call still running.
// - With `simulation` set, no thread is started: the executors live on the calling thread, get their
//   backends from the simulation, and the simulation runs their turns whenever the engine waits
//   (block_on, stop). Signals are not handled then. The caller installs the simulation's kernel as
//   the thread's system (system_scope) for as long as the job runs.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/simulation.hpp>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace sluice::runtime {

// The stall detector (runtime/src/stall_detector.hpp): a thread that watches every executor thread
// of an engine and reports a turn that has run longer than `threshold` (a blocking call on an
// executor, or a coroutine that computes for too long without yielding: docs/design.md invariant 5),
// not counting time the thread waited for a CPU. Each stall is logged once, naming the executor,
// how long, what it runs and the system call it is blocked in, and counted (engine::stalls).
struct stall_options {
  std::chrono::milliseconds threshold{100};  // a turn this long is logged and counted; 0: off
  std::chrono::milliseconds fatal_after{0};  // one this long aborts the process after its report; 0: never
  // SLUICE_STALL_MS=<ms> and SLUICE_STALL_FATAL_MS=<ms> (the test suite runs with the second set).
  static stall_options from_environment();
};
class stall_detector;
namespace detail {
struct thread_beat;
}

struct engine_options {
  // 0 means one per online CPU.
  unsigned executors = 0;
  bool pin_cpus = false;
  bool handle_signals = true;
  // With handle_signals: called on executor 0 with each SIGINT/SIGTERM. Returns whether the engine
  // stops (as without it: request_stop(), and stop_signal() says which); false: the callback took
  // care of it (a drain, say) and the engine watches for the next signal.
  std::function<bool(int signo)> on_signal;
  uring_options uring{};
  unsigned batch_limit = 256;
  runtime::simulation* simulation = nullptr;
  // Threads, at most, of the engine's blocking-work pool (offload.hpp), started as needed and
  // joined by stop().
  unsigned blocking_threads = 4;
  // The stall detector (above), from the environment by default. Never under a simulation.
  stall_options stalls = stall_options::from_environment();
};

class engine {
 public:
  explicit engine(engine_options options = {});
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  std::size_t size() const noexcept { return executors_.size(); }
  executor& at(std::size_t index) const noexcept { return *executors_[index]; }

  template <class T>
  T block_on(task<T> t);

  // Any thread: asks every executor to stop. Idempotent (only the first call posts).
  void request_stop() noexcept;
  // The signal that stopped the engine (0 if none).
  int stop_signal() const noexcept { return stop_signal_.load(); }
  // Stops and joins every executor (idempotent; the destructor calls it).
  void stop();
  // Stalls the stall detector found so far (stall_detector.hpp), on executor `index`.
  std::uint64_t stalls(std::size_t index) const noexcept;

 private:
  void thread_main(std::size_t index, std::promise<executor*> ready);
  void start_simulated(unsigned n);
  void stop_simulated();
  // Waits for `done` (set by a task on executor 0): a future, or the simulation's turns.
  struct completion {
    std::promise<void> promise;
    bool flag = false;
    void set() {
      flag = true;
      promise.set_value();
    }
  };
  void wait(completion& done);
  task<void> watch_signals();

  engine_options options_;
  std::unique_ptr<blocking_pool> blocking_;
  std::vector<executor*> executors_;
  std::vector<std::unique_ptr<executor>> owned_;  // created on, and shut down by, their threads
  std::vector<std::thread> threads_;
  std::vector<detail::thread_beat*> beats_;    // each executor thread's, for the stall detector
  std::unique_ptr<stall_detector> detector_;  // watches the executor threads (none simulated)
  void* barrier_ = nullptr;  // shutdown phases, shared by the executor threads
  int signal_fd_ = -1;
  sigset_t previous_mask_{};
  std::atomic<int> stop_signal_{0};
  // Set by the first request_stop(): executors may finish and be destroyed after it, so no later
  // call may post to them.
  std::atomic<bool> stop_requested_{false};
  bool stopped_ = false;
};

template <class T>
T engine::block_on(task<T> t) {
  completion done;
  std::optional<std::conditional_t<std::is_void_v<T>, int, T>> value;
  std::exception_ptr error;
  struct runner {
    static task<void> run(task<T> t, decltype(value)* out, std::exception_ptr* err, completion* done) {
      {
        // Destroyed before set_value: the caller may unwind its stack as soon as that runs.
        task<T> inner = std::move(t);
        try {
          if constexpr (std::is_void_v<T>) {
            co_await std::move(inner);
            out->emplace(0);
          } else {
            out->emplace(co_await std::move(inner));
          }
        } catch (...) {
          *err = std::current_exception();
        }
      }
      done->set();
    }
  };
  spawn_on(at(0), runner::run(std::move(t), &value, &error, &done));
  wait(done);
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*value);
}

}  // namespace sluice::runtime
