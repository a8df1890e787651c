// world: the scheduler, the executors' backends and the trace (see world.hpp).

#include <sluice/sim/world.hpp>

#include "world_backend.hpp"

#include <sluice/runtime/wait_report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace sluice::sim {

using runtime::io_op;
using runtime::op_code;

world::world(world_options options, const disk_image& image)
    : options_(std::move(options)),
      random_(options_.seed),
      disk_(image),
      start_(clock::time_point(std::chrono::hours(24))),
      now_(start_) {
  std::string cwd;
  if (normalize_path(options_.working_directory, cwd)) {
    disk::ino i = 0;
    if (disk_.lookup(cwd, i) != 0) {
      // The working directory exists from the start, durably.
      disk_image with = disk_.visible();
      with.add_directory(cwd);
      disk_ = disk(with);
    }
  }
}

world::~world() = default;

std::unique_ptr<runtime::io_backend> world::make_backend(int index) {
  auto b = std::make_unique<backend>(*this, index, options_.ring_entries);
  backends_.push_back(b.get());
  return b;
}

void world::note(const char* what, std::int64_t a, std::int64_t b, const std::string& detail) {
  auto fold = [this](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= 0x100000001b3ull;
    }
  };
  for (const char* c = what; *c != '\0'; ++c) fold(static_cast<unsigned char>(*c));
  fold(static_cast<std::uint64_t>(a));
  fold(static_cast<std::uint64_t>(b));
  fold(static_cast<std::uint64_t>((now_ - start_).count()));
  if (options_.trace != nullptr) {
    fmt::print(options_.trace, "{:>9} {:>12.3f}ms {} {} {}{}{}\n", steps_,
               std::chrono::duration<double, std::milli>(now_ - start_).count(), what, a, b,
               detail.empty() ? "" : " ", detail);
  }
}

std::chrono::system_clock::time_point world::wall_now() noexcept {
  // 2026-01-01T00:00:00Z plus the simulated time.
  return std::chrono::system_clock::time_point(std::chrono::seconds(1767225600)) +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(now_ - start_);
}

bool world::fault(std::uint32_t per_million) {
  if (per_million == 0 || !faults_active()) return false;
  if (!random_.chance(per_million)) return false;
  ++faults_injected_;
  return true;
}

void world::run(std::span<runtime::executor* const> executors, bool (*done)(void*), void* context) {
  std::vector<runtime::executor*> runnable;
  std::vector<std::size_t> ready_ops;
  while (!done(context)) {
    if (options_.crash_at_step != 0 && steps_ >= options_.crash_at_step) {
      note("crash", 0, 0);
      if (options_.on_crash) options_.on_crash(*this);
      throw hang("the simulated process crashed, and nobody took the crash image");
    }
    if (options_.alarm_at_step != 0 && steps_ >= options_.alarm_at_step) {
      options_.alarm_at_step = 0;
      note("alarm", 0, 0);
      if (options_.on_alarm) options_.on_alarm(*this);
    }
    if (options_.published_steps != nullptr) options_.published_steps->store(steps_, std::memory_order_relaxed);
    check_budgets(executors);
    if (now_ - start_ > options_.faults_for + options_.liveness_limit) {
      report_hang(fmt::format("the job did not finish within {} s of simulated time after the faults stopped\n{}",
                              std::chrono::duration_cast<std::chrono::seconds>(options_.liveness_limit).count(),
                              describe_waits(executors)));
    }
    drain_backlogs();
    runnable.clear();
    for (runtime::executor* ex : executors) {
      if (ex->has_work()) runnable.push_back(ex);
    }
    ready_ops.clear();
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].ready_at <= now_ && can_complete(pending_[i])) ready_ops.push_back(i);
    }
    if (runnable.empty() && ready_ops.empty()) {
      clock::time_point next = clock::time_point::max();
      for (const pending_op& p : pending_) next = std::min(next, wake_time(p));
      if (next == clock::time_point::max()) {
        report_hang("nothing can make progress: no coroutine is ready, no operation can complete, no timer is set\n" +
                    describe_waits(executors));
      }
      now_ = next;
      idle_steps_ = 0;
      continue;
    }
    const std::size_t pick = random_.below(runnable.size() + ready_ops.size());
    if (pick < runnable.size()) {
      runtime::executor* ex = runnable[pick];
      note("turn", ex->id(), 0);
      longest_idle_ = std::max(longest_idle_, ++idle_steps_);
      ex->turn(false);
    } else {
      idle_steps_ = 0;
      // A completion only schedules its waiter (invariant 3): no resume from inside it.
      const bool outer = std::exchange(runtime::detail::dispatching, true);
      complete(ready_ops[pick - runnable.size()]);
      runtime::detail::dispatching = outer;
    }
    now_ += std::chrono::nanoseconds(random_.between(100, 2000));
    ++steps_;
  }
}

void world::check_budgets(std::span<runtime::executor* const> executors) {
  if (options_.describe_at_step != 0 && steps_ >= options_.describe_at_step) {
    report_hang(fmt::format("what everything waited for just before step {}:\n{}", steps_, describe_waits(executors)));
  }
  if (options_.step_limit != 0 && steps_ >= options_.step_limit) {
    report_hang(fmt::format("the process took {} steps, its budget (at {:.3f} ms of simulated time), without "
                            "finishing\n{}", steps_, std::chrono::duration<double, std::milli>(now_ - start_).count(),
                            describe_waits(executors)));
  }
  if (options_.idle_step_limit != 0 && idle_steps_ >= options_.idle_step_limit) {
    report_hang(fmt::format("{} steps in a row were turns of coroutines resuming one another: no operation "
                            "completed and time never jumped to a timer (a busy loop; step {}, {:.3f} ms)\n{}",
                            idle_steps_, steps_, std::chrono::duration<double, std::milli>(now_ - start_).count(),
                            describe_waits(executors)));
  }
}

void world::report_hang(const std::string& why) {
  note("hang", 0, 0);
  if (options_.on_hang) options_.on_hang(*this, why);
  throw hang(why);
}

std::string world::describe_waits(std::span<runtime::executor* const> executors) const {
  std::string out;
  for (runtime::executor* ex : executors) {
    out += fmt::format("  executor {}: {} detached task(s){}\n", ex->id(), ex->detached_tasks(),
                       ex->has_work() ? ", work ready" : "");
  }
  for (const pending_op& p : pending_) {
    const io_op& op = *p.op;
    std::string what = runtime::to_string(op.code);
    if (const descriptor* d = find(op.fd)) {
      what += d->what == descriptor::kind::socket ? fmt::format(" on socket {}", op.fd) : " on '" + d->path + "'";
    } else if (op.code == op_code::read && op.internal) {
      what = "the executor's wake-up read";
    } else if (op.code == op_code::timeout) {
      what += fmt::format(" due at {:.3f} ms", std::chrono::duration<double, std::milli>(op.deadline - start_).count());
    }
    out += fmt::format("  executor {} waits for {} (submitted {:.3f} ms ago)\n", p.owner->index(), what,
                       std::chrono::duration<double, std::milli>(now_ - p.ready_at).count());
  }
  for (const backend* b : backends_) {
    b->admission_.for_each_backlogged([&](const io_op& op) {
      out += fmt::format("  executor {} has {} on fd {} in its {} backlog (the ring holds {} in flight, {} of them waits)\n",
                         b->index(), runtime::to_string(op.code), op.fd, runtime::to_string(runtime::class_of(op)),
                         b->admission_.in_flight(runtime::op_class::prompt) + b->admission_.in_flight(runtime::op_class::wait),
                         b->admission_.in_flight(runtime::op_class::wait));
    });
  }
  // What the program's own parts say they wait for (a job's tasks: wait_report.hpp).
  out += runtime::describe_waits();
  return out;
}

}  // namespace sluice::sim
