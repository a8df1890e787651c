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
//   log::warn("checkpoint {} declined: {}", id, reason);

#include <fmt/core.h>

#include <cstdint>
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

template <class... Args>
void at(log_level lvl, fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(lvl)) write(lvl, fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  at(log_level::error, format, std::forward<Args>(args)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  at(log_level::warn, format, std::forward<Args>(args)...);
}
template <class... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  at(log_level::info, format, std::forward<Args>(args)...);
}
template <class... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  at(log_level::debug, format, std::forward<Args>(args)...);
}

}  // namespace log
}  // namespace sluice::runtime
