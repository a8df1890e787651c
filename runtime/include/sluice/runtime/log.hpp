#pragma once
// Logging: one line per event on stderr, through fmt.
//
// The level comes from the environment variable SLUICE_LOG (error|warn|info|debug; default warn)
// and is read once. Each line names the executor it was written on ("ex0", or "--" off an
// executor), so interleaved output from several executors can be told apart.
//
// A log line never blocks an executor on a slow stderr (a pipe nobody drains, a terminal, a
// network-backed journal): on an executor thread it goes to a bounded queue that one writer thread
// drains; a line that does not fit is dropped, and the count is written in its place ("sluice:
// log: N line(s) dropped"). Other threads, and every thread under a simulation (simulation.hpp)
// or a stand-in system (system.hpp), write inline. Each thread's lines keep their order. The queue
// is flushed at exit and by flush(), which a fatal error (SLUICE_ASSERT) calls before it aborts;
// _exit and kill -9 lose what is queued.
//
// A sink (set_sink) takes the place of stderr: every line goes to it instead, as an event (its
// level, the executor, the text, and the whole line as stderr would have shown it), called on the
// thread that would have written it (the writer thread for an executor's lines), one call at a
// time, in each thread's order. A host that embeds sluice routes its logs this way; the sluice
// tool uses it to keep log lines off its live progress line.
//
//   log::warn("checkpoint {} declined: {}", id, reason);

#include <fmt/core.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

namespace sluice::runtime {

enum class log_level : int { error = 0, warn = 1, info = 2, debug = 3 };

namespace log {

// The active level; parsed from SLUICE_LOG on first use.
log_level level() noexcept;
void set_level(log_level level) noexcept;
inline bool enabled(log_level at) noexcept { return static_cast<int>(at) <= static_cast<int>(level()); }

// Writes one formatted line (already filtered by level).
void write(log_level at, std::string_view message) noexcept;
// Waits (at most a few seconds) until every line queued before the call is written to stderr.
// Any thread. For fatal errors, before _exit, and for tests that read what was logged.
void flush() noexcept;
// Lines dropped so far because the queue was full.
std::uint64_t dropped_lines() noexcept;

struct event {
  log_level level = log_level::info;
  int executor = -1;  // the executor's id, or -1 off an executor
  std::chrono::system_clock::time_point time;
  std::string_view text;  // the message
  std::string_view line;  // "2026-12-02T03:00:15.293Z info  ex0 <text>", no newline
};
using sink = std::function<void(const event&)>;
// Sends every line from now on to `s` instead of stderr (an empty one: back to stderr), and
// returns the previous sink. Lines queued before the call may go to either. Returns once no call
// to the previous sink runs any more. The sink must not log (it would deadlock) and should be
// quick: an executor's lines queue behind it (and are dropped when the queue is full), never the
// executor.
sink set_sink(sink s);

// Installs a sink for its lifetime (none if `s` is empty); the destructor flushes what was queued
// meanwhile into it, then puts the previous one back.
class scoped_sink {
 public:
  explicit scoped_sink(sink s) : on_(static_cast<bool>(s)) {
    if (on_) previous_ = set_sink(std::move(s));
  }
  ~scoped_sink() {
    if (!on_) return;
    flush();
    (void)set_sink(std::move(previous_));
  }
  scoped_sink(const scoped_sink&) = delete;
  scoped_sink& operator=(const scoped_sink&) = delete;

 private:
  bool on_;
  sink previous_;
};

// Out of memory while formatting (the commonest place to meet it: an error path logs) costs the line,
// never the caller: logging never throws.
void write_unformatted(log_level at, std::string_view format) noexcept;

template <class... Args>
void at(log_level lvl, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!enabled(lvl)) return;
  try {
    write(lvl, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {
    const fmt::string_view text = format;
    write_unformatted(lvl, std::string_view(text.data(), text.size()));
  }
}
template <class... Args>
void error(fmt::format_string<Args...> format, Args&&... args) noexcept {
  at(log_level::error, format, std::forward<Args>(args)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) noexcept {
  at(log_level::warn, format, std::forward<Args>(args)...);
}
template <class... Args>
void info(fmt::format_string<Args...> format, Args&&... args) noexcept {
  at(log_level::info, format, std::forward<Args>(args)...);
}
template <class... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) noexcept {
  at(log_level::debug, format, std::forward<Args>(args)...);
}

}  // namespace log
}  // namespace sluice::runtime
