// See stall_detector.hpp.

#include "stall_detector.hpp"

#include <sluice/runtime/log.hpp>

#include "helper_thread.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

namespace sluice::runtime {

namespace {

using clock = std::chrono::steady_clock;

// Nanoseconds the thread spent runnable but waiting for a CPU (the second field of schedstat).
std::optional<std::uint64_t> queued_ns(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  std::uint64_t run = 0, wait = 0;
  if (!(in >> run >> wait)) return std::nullopt;
  return wait;
}

// The system call the thread is blocked in, if it is ("sendmsg", or "system call 300").
std::string blocked_in(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string first;
  if (!(in >> first) || first == "running" || first.empty() || first[0] == '-') return {};
  const long nr = std::strtol(first.c_str(), nullptr, 10);
#if defined(__x86_64__)
  // The calls a blocked executor is usually found in.
  static constexpr struct {
    long nr;
    const char* name;
  } names[] = {{0, "read"},        {1, "write"},           {3, "close"},     {7, "poll"},      {17, "pread64"},
               {18, "pwrite64"},   {19, "readv"},          {20, "writev"},   {23, "select"},   {35, "nanosleep"},
               {42, "connect"},    {43, "accept"},         {44, "sendto"},   {45, "recvfrom"}, {46, "sendmsg"},
               {47, "recvmsg"},    {61, "wait4"},          {73, "flock"},    {74, "fsync"},    {75, "fdatasync"},
               {202, "futex"},     {217, "getdents64"},    {230, "clock_nanosleep"},           {232, "epoll_wait"},
               {257, "openat"},    {270, "pselect6"},      {271, "ppoll"},   {426, "io_uring_enter"}};
  for (const auto& n : names) {
    if (n.nr == nr) return n.name;
  }
#endif
  return "system call " + std::to_string(nr);
}

std::string symbolize(const void* code) {
  if (code == nullptr) return "nothing known";
  Dl_info info{};
  if (::dladdr(code, &info) == 0) return fmt::format("code at {}", code);
  if (info.dli_sname != nullptr) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
    std::free(demangled);
    return name;
  }
  const auto offset = reinterpret_cast<std::uintptr_t>(code) - reinterpret_cast<std::uintptr_t>(info.dli_fbase);
  return fmt::format("{}+{:#x} (addr2line -Cfe {} {:#x})", info.dli_fname ? info.dli_fname : "?", offset,
                     info.dli_fname ? info.dli_fname : "?", offset);
}

}  // namespace

stall_options stall_options::from_environment() {
  stall_options o;
  if (const char* ms = std::getenv("SLUICE_STALL_MS"); ms != nullptr && *ms != '\0') {
    o.threshold = std::chrono::milliseconds(std::strtoll(ms, nullptr, 10));
  }
  if (const char* ms = std::getenv("SLUICE_STALL_FATAL_MS"); ms != nullptr && *ms != '\0') {
    o.fatal_after = std::chrono::milliseconds(std::strtoll(ms, nullptr, 10));
  }
  return o;
}

std::string stall_detector::describe_activity(const detail::thread_beat& beat) {
  using activity = detail::thread_beat::activity;
  switch (beat.kind.load(std::memory_order_relaxed)) {
    case activity::coroutine: return "a coroutine: " + symbolize(beat.code.load(std::memory_order_relaxed));
    case activity::message: return "a posted message: " + symbolize(beat.code.load(std::memory_order_relaxed));
    case activity::completions: return "I/O completions";
  }
  return "?";
}

struct stall_detector::state {
  struct watched {
    const detail::thread_beat* beat = nullptr;
    std::size_t index = 0;  // the executor's
    std::uint64_t last_beat = 1;  // odd: nothing seen yet
    std::optional<clock::time_point> frozen_since;
    std::uint64_t queued_at_freeze = 0;
    bool reported = false;
    std::chrono::milliseconds reported_for{0};
    std::atomic<std::uint64_t> stalls{0};
  };
  stall_options options;
  std::vector<std::unique_ptr<watched>> executors;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread thread;

  void loop() {
    detail::block_all_signals();
    const auto period = std::max(options.threshold / 4, std::chrono::milliseconds(1));
    std::unique_lock lock(mutex);
    while (!wake.wait_for(lock, period, [this] { return stopping; })) {
      for (auto& w : executors) {
        try {
          look(*w);
        } catch (const std::bad_alloc&) {
          // No memory for the report (its text, the call read from /proc): the next look tries again.
        }
      }
    }
  }

  void look(watched& w) {
    const std::uint64_t beat = w.beat->now();
    if (beat != w.last_beat || (beat & 1) != 0) {
      if (w.reported) {
        log::warn("executor {}: turned again after a stall of at least {} ms", w.index, w.reported_for.count());
      }
      w.last_beat = beat;
      w.frozen_since.reset();
      w.reported = false;
      return;
    }
    const clock::time_point now = clock::now();
    const int tid = w.beat->tid;
    if (!w.frozen_since) {
      w.frozen_since = now;
      w.queued_at_freeze = queued_ns(tid).value_or(0);
      return;
    }
    // Frozen since the last look at least: time not spent waiting for a CPU.
    const std::uint64_t queued = queued_ns(tid).value_or(w.queued_at_freeze) - w.queued_at_freeze;
    const auto stalled = std::chrono::duration_cast<std::chrono::milliseconds>(now - *w.frozen_since) -
                         std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(queued));
    if (stalled < options.threshold) return;
    w.reported_for = stalled;
    const bool fatal = options.fatal_after.count() > 0 && stalled >= options.fatal_after;
    if (w.reported && !fatal) return;
    if (!w.reported) w.stalls.fetch_add(1, std::memory_order_relaxed);
    w.reported = true;
    const std::string call = blocked_in(tid);
    const std::string message = fmt::format(
        "executor {} stalled: one turn has run for {} ms (threshold {} ms; not counting time waiting for a CPU), "
        "running {}{}; nothing else on this executor runs meanwhile (a blocking call on an executor, or a "
        "coroutine that computes without yielding: docs/design.md invariant 5)",
        w.index, stalled.count(), options.threshold.count(), describe_activity(*w.beat),
        call.empty() ? std::string() : fmt::format(", blocked in {}", call));
    if (fatal) {
      log::error("{} (SLUICE_STALL_FATAL_MS={}: aborting)", message, options.fatal_after.count());
      log::flush();
      std::abort();
    }
    log::warn("{}", message);
  }
};

stall_detector::stall_detector(std::vector<detail::thread_beat*> beats, stall_options options)
    : state_(std::make_unique<state>()) {
  state_->options = options;
  for (std::size_t i = 0; i < beats.size(); ++i) {
    auto w = std::make_unique<state::watched>();
    w->beat = beats[i];
    w->index = i;
    state_->executors.push_back(std::move(w));
  }
  if (options.threshold.count() > 0 && !beats.empty()) {
    try {
      state_->thread = std::thread([this] { state_->loop(); });
    } catch (const std::system_error& e) {
      throw detail::described_error(e.code(), detail::thread_start_failure("the stall detector's thread", e.code().value()));
    }
  }
}

stall_detector::~stall_detector() { stop(); }

void stall_detector::stop() noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

std::uint64_t stall_detector::stalls(std::size_t executor) const noexcept {
  if (executor >= state_->executors.size()) return 0;
  return state_->executors[executor]->stalls.load(std::memory_order_relaxed);
}

std::uint64_t stall_detector::stalls() const noexcept {
  std::uint64_t n = 0;
  for (const auto& w : state_->executors) n += w->stalls.load(std::memory_order_relaxed);
  return n;
}

}  // namespace sluice::runtime
