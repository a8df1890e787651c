#pragma once
// simulation: what an engine needs to run every executor on the calling thread, in an order some
// other party decides (the deterministic simulator in sim/). With engine_options::simulation set,
// the engine starts no thread: it asks the simulation for each executor's I/O backend and, whenever
// it would wait (block_on, shutdown), lets the simulation run the executors' turns until the
// awaited condition holds. The simulation also stands in for the kernel's synchronous calls
// (system.hpp) while the engine lives.

#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/system.hpp>

#include <cstddef>
#include <memory>
#include <span>

namespace sluice::runtime {

class executor;

class simulation {
 public:
  virtual ~simulation() = default;
  // The backend of executor `index` (called once per executor, on the simulation's thread).
  virtual std::unique_ptr<io_backend> make_backend(int index) = 0;
  // The synchronous system calls of the simulated machine.
  virtual system& kernel() noexcept = 0;
  // Runs turns of `executors` (each turn with turn(false): nothing may block) until done(context)
  // is true. What it does when nothing can progress any more is the simulation's business (report
  // a hang and end the process, throw); it must not return before done(context) holds.
  virtual void run(std::span<executor* const> executors, bool (*done)(void*), void* context) = 0;
  // Which of an executor's `ready` (> 1) ready coroutines it resumes next: 0 is the oldest, what
  // the executor does outside a simulation (its run queue is FIFO). Called once per resume.
  virtual std::size_t pick_ready(std::size_t ready) noexcept = 0;
};

}  // namespace sluice::runtime
