// switch: the cost of the runtime's control transfers, in ns each.
//
// - yield: one coroutine doing `co_await yield()` (back of the run queue and resumed again).
// - spawn: spawn a trivial task and let it finish (two frames: the task and its detached root).
// - await: `co_await` a trivial task inline (one frame, symmetric transfer there and back).
// - fiber: a Boost.Context fiber round trip on the real path (the fiber's `await(yield())` goes to
//   its driver task and back), measured by the runtime's own bench_support hook.
// - cross_executor: one hop of `co_await switch_to(other)` between two executors of an engine.
// Baselines, measured in the same run: a call through std::function (yield, spawn, await) and a
// std::thread ping-pong with std::mutex + std::condition_variable (cross_executor, one way).
// The ratio is figure / baseline: how many baseline operations one runtime operation costs.

#include "bench.hpp"

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/sync_wait.hpp>

#if __has_include(<sluice/runtime/fiber.hpp>)
#include <sluice/runtime/fiber.hpp>
#define SLUICE_BENCH_HAVE_FIBER 1
#else
#define SLUICE_BENCH_HAVE_FIBER 0
#endif

#include <fmt/core.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace sluice::bench {
namespace {

namespace rt = sluice::runtime;

double elapsed_ns(bench_clock::time_point start) {
  return std::chrono::duration<double, std::nano>(bench_clock::now() - start).count();
}

// --- figures ----------------------------------------------------------------------------------

rt::task<double> yield_loop(std::chrono::nanoseconds duration) {
  std::uint64_t n = 0;
  const auto start = bench_clock::now();
  do {
    for (int i = 0; i < 1024; ++i) co_await rt::yield();
    n += 1024;
  } while (bench_clock::now() - start < duration);
  co_return elapsed_ns(start) / static_cast<double>(n);
}

rt::task<void> trivial_task() { co_return; }
rt::task<int> trivial_value(int v) { co_return v + 1; }

// Spawns a batch of trivial tasks, then yields: they are queued ahead of us, so when we resume
// every one of them has run and freed its frames.
rt::task<double> spawn_loop(std::chrono::nanoseconds duration) {
  constexpr int batch = 255;  // with us, one executor turn's worth (batch_limit 256)
  rt::executor& ex = *rt::executor::current();
  std::uint64_t n = 0;
  const auto start = bench_clock::now();
  do {
    for (int i = 0; i < batch; ++i) ex.spawn(trivial_task());
    co_await rt::yield();
    n += batch;
  } while (bench_clock::now() - start < duration);
  const double ns = elapsed_ns(start) / static_cast<double>(n);
  if (ex.detached_tasks() != 0) throw std::logic_error("spawned tasks still running after the yield");
  co_return ns;
}

rt::task<double> await_loop(std::chrono::nanoseconds duration) {
  std::uint64_t n = 0;
  int acc = 0;
  const auto start = bench_clock::now();
  do {
    for (int i = 0; i < 1024; ++i) acc = co_await trivial_value(acc);
    n += 1024;
  } while (bench_clock::now() - start < duration);
  do_not_optimize(acc);
  co_return elapsed_ns(start) / static_cast<double>(n);
}

// One round trip is two hops.
struct hop_result {
  double ns_per_hop = 0;
  std::uint64_t hops = 0;
};

rt::task<hop_result> hop_loop(rt::executor* home, rt::executor* other, std::chrono::nanoseconds duration) {
  std::uint64_t hops = 0;
  const auto start = bench_clock::now();
  do {
    for (int i = 0; i < 64; ++i) {
      co_await rt::switch_to(*other);
      co_await rt::switch_to(*home);
    }
    hops += 128;
  } while (bench_clock::now() - start < duration);
  if (!home->is_current()) throw std::logic_error("switch_to did not come back home");
  co_return hop_result{elapsed_ns(start) / static_cast<double>(hops), hops};
}

// ns per hop; also adds the eventfd wake-ups the two executors needed per hop to `wakeups_per_hop`
// (0 when the receiver was awake or spinning, 1 when every hop had to wake a sleeping executor).
double cross_executor_ns(std::chrono::nanoseconds duration, bool pin, std::vector<double>* wakeups_per_hop) {
  rt::engine_options o;
  o.executors = 2;
  o.pin_cpus = pin;
  o.handle_signals = false;
  rt::engine eng(o);
  const hop_result r = eng.block_on(hop_loop(&eng.at(0), &eng.at(1), duration));
  const std::uint64_t wakeups = eng.at(0).wakeups_sent() + eng.at(1).wakeups_sent();
  wakeups_per_hop->push_back(static_cast<double>(wakeups) / static_cast<double>(r.hops));
  return r.ns_per_hop;
}

// --- baselines --------------------------------------------------------------------------------

double std_function_ns(std::chrono::nanoseconds duration) {
  std::uint64_t counter = 0;
  std::function<void()> fn = [&counter] { ++counter; };
  do_not_optimize(fn);  // the compiler must not see through the call
  std::uint64_t n = 0;
  const auto start = bench_clock::now();
  do {
    for (int i = 0; i < 1024; ++i) fn();
    n += 1024;
  } while (bench_clock::now() - start < duration);
  const double ns = elapsed_ns(start) / static_cast<double>(n);
  do_not_optimize(counter);
  return ns;
}

void pin_this_thread(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % std::max(1u, std::thread::hardware_concurrency()), &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Two threads hand a turn back and forth under a mutex, each waiting on its condition variable.
double condvar_ns(std::chrono::nanoseconds duration, bool pin) {
  std::mutex m;
  std::condition_variable to_peer, to_main;
  int turn = 0;  // 0: main's turn, 1: peer's
  bool stop = false;
  std::thread peer([&] {
    if (pin) pin_this_thread(1);
    std::unique_lock lock(m);
    for (;;) {
      to_peer.wait(lock, [&] { return turn == 1 || stop; });
      if (stop) return;
      turn = 0;
      lock.unlock();
      to_main.notify_one();
      lock.lock();
    }
  });
  if (pin) pin_this_thread(0);
  std::uint64_t hops = 0;
  const auto start = bench_clock::now();
  do {
    for (int i = 0; i < 64; ++i) {
      {
        std::lock_guard lock(m);
        turn = 1;
      }
      to_peer.notify_one();
      std::unique_lock lock(m);
      to_main.wait(lock, [&] { return turn == 0; });
    }
    hops += 128;
  } while (bench_clock::now() - start < duration);
  const double ns = elapsed_ns(start) / static_cast<double>(hops);
  {
    std::lock_guard lock(m);
    stop = true;
  }
  to_peer.notify_one();
  peer.join();
  if (pin) {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()); ++c) CPU_SET(c, &all);
    pthread_setaffinity_np(pthread_self(), sizeof all, &all);
  }
  return ns;
}

// --- the benchmark ----------------------------------------------------------------------------

class switch_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "switch"; }
  std::string_view description() const noexcept override {
    return "ns per yield, spawn+complete, inline await, fiber switch and cross-executor hop";
  }
  std::vector<option> options() override {
    return {
        {"--duration-ms", "length of each measurement (figure and baseline each)", &duration_ms_},
        {"--pin", "cross-executor: pin the two executors (and the baseline's threads) to CPUs 0 and 1", &pin_},
        {"--fiber-iterations", "fiber switches per measurement", &fiber_iterations_},
        {"--only", "comma-separated subset of: yield,spawn,await,fiber,cross_executor (default: all)", &only_},
    };
  }

  void run(const common_options& common, const reporter& out) override {
    if (duration_ms_ == 0) throw std::invalid_argument("--duration-ms must be at least 1");
    const std::vector<std::string> parts = selected();
    const auto wanted = [&parts](std::string_view what) {
      return std::find(parts.begin(), parts.end(), what) != parts.end();
    };
    const std::chrono::nanoseconds d = std::chrono::milliseconds(duration_ms_);
    const auto baseline = [d] { return std_function_ns(d); };
    constexpr std::string_view fn_label = "std::function call";
    constexpr std::string_view fn_field = "baseline_std_function_ns";

    if (wanted("yield")) {
      report(out, common, "yield", "yield_ns", "co_await yield()", fn_label, fn_field,
             measure_paired(common.runs, [d] { return rt::sync_wait(yield_loop(d)); }, baseline), 10.0);
    }
    if (wanted("spawn")) {
      report(out, common, "spawn", "spawn_ns", "spawn + complete", fn_label, fn_field,
             measure_paired(common.runs, [d] { return rt::sync_wait(spawn_loop(d)); }, baseline), 60.0);
    }
    if (wanted("await")) {
      report(out, common, "await", "await_task_ns", "co_await trivial task", fn_label, fn_field,
             measure_paired(common.runs, [d] { return rt::sync_wait(await_loop(d)); }, baseline), std::nullopt);
    }
    if (wanted("fiber")) {
#if SLUICE_BENCH_HAVE_FIBER
      const std::uint64_t iterations = fiber_iterations_;
      const auto fiber = [iterations] { return rt::bench_support::measure_fiber_switch_ns(iterations); };
      report(out, common, "fiber", "fiber_switch_ns", "fiber await(yield()) round trip", fn_label, fn_field,
             measure_paired(common.runs, fiber, baseline), std::nullopt);
#else
      if (out.json()) {
        out.result(name(), "", {{"result", std::string("fiber")}, {"available", false}});
      } else {
        out.note("switch fiber: not available yet (no <sluice/runtime/fiber.hpp> in this build)");
      }
#endif
    }
    if (wanted("cross_executor")) {
      const bool pin = pin_;
      std::vector<double> wakeups;
      const paired_result r = measure_paired(
          common.runs, [d, pin, &wakeups] { return cross_executor_ns(d, pin, &wakeups); },
          [d, pin] { return condvar_ns(d, pin); });
      report(out, common, "cross_executor", "cross_executor_ns", "cross-executor hop (switch_to)",
             "thread ping-pong, mutex+condvar, one way", "baseline_condvar_ns", r, std::nullopt,
             field{"wakeups_per_hop", median(wakeups)});
    }
  }

 private:
  std::vector<std::string> selected() const {
    static constexpr std::string_view all[] = {"yield", "spawn", "await", "fiber", "cross_executor"};
    std::vector<std::string> parts;
    if (only_.empty()) {
      for (auto a : all) parts.emplace_back(a);
      return parts;
    }
    std::size_t from = 0;
    while (from <= only_.size()) {
      const std::size_t comma = std::min(only_.find(',', from), only_.size());
      std::string part = only_.substr(from, comma - from);
      if (std::find(std::begin(all), std::end(all), part) == std::end(all)) {
        throw std::invalid_argument(fmt::format("--only: unknown part '{}' (known: yield, spawn, await, fiber, "
                                                "cross_executor)", part));
      }
      parts.push_back(std::move(part));
      from = comma + 1;
    }
    return parts;
  }

  void report(const reporter& out, const common_options& common, std::string_view result, std::string_view field_name,
              std::string_view label, std::string_view baseline_label, std::string_view baseline_field,
              const paired_result& r, std::optional<double> target_ns,
              std::optional<field> extra = std::nullopt) const {
    const double ratio = r.figure / r.baseline;
    std::string target_text;
    std::vector<field> fields{{"result", std::string(result)},
                              {std::string(field_name), r.figure},
                              {std::string(baseline_field), r.baseline},
                              {"ratio", ratio}};
    if (target_ns) {
      const bool met = r.figure <= *target_ns;
      target_text = fmt::format("  target <= {:.0f} ns: {}", *target_ns, met ? "met" : "MISSED");
      fields.push_back({"target_ns", *target_ns});
      fields.push_back({"target_met", met});
    }
    fields.push_back({"duration_ms", duration_ms_});
    fields.push_back({"runs", std::uint64_t{common.runs}});
    if (result == "cross_executor") fields.push_back({"pinned", pin_});
    std::string extra_text;
    if (extra) {
      fields.push_back(*extra);
      if (const auto* v = std::get_if<double>(&extra->value)) extra_text = fmt::format("  ({} {:.2f})", extra->key, *v);
    }
    out.result(name(),
               fmt::format("switch {}: {} {:.1f} ns  baseline ({}) {:.1f} ns  ratio {:.2f}{}{}", result, label,
                           r.figure, baseline_label, r.baseline, ratio, target_text, extra_text),
               fields);
  }

  std::uint64_t duration_ms_ = 100;
  std::uint64_t fiber_iterations_ = 1'000'000;
  bool pin_ = false;
  std::string only_;
};

registration<switch_bench> reg;

}  // namespace
}  // namespace sluice::bench
