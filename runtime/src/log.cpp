// Logging (see log.hpp).

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace sluice::runtime::log {
namespace {

log_level parse_env() noexcept {
  const char* v = std::getenv("SLUICE_LOG");
  if (v == nullptr || *v == '\0') return log_level::warn;
  if (std::strcmp(v, "error") == 0) return log_level::error;
  if (std::strcmp(v, "warn") == 0 || std::strcmp(v, "warning") == 0) return log_level::warn;
  if (std::strcmp(v, "info") == 0) return log_level::info;
  if (std::strcmp(v, "debug") == 0) return log_level::debug;
  std::fprintf(stderr, "sluice: SLUICE_LOG='%s' is not one of error|warn|info|debug; using warn\n", v);
  return log_level::warn;
}

std::atomic<int>& current_level() noexcept {
  static std::atomic<int> level{static_cast<int>(parse_env())};
  return level;
}

constexpr const char* names[] = {"error", "warn", "info", "debug"};

}  // namespace

log_level level() noexcept { return static_cast<log_level>(current_level().load(std::memory_order_relaxed)); }
void set_level(log_level l) noexcept { current_level().store(static_cast<int>(l), std::memory_order_relaxed); }

void write(log_level at, std::string_view message) noexcept {
  try {
    const auto now = std::chrono::system_clock::now();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    executor* ex = executor::current();
    fmt::memory_buffer line;
    fmt::format_to(std::back_inserter(line), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {:5} ", tm.tm_year + 1900,
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms, names[static_cast<int>(at)]);
    if (ex != nullptr) {
      fmt::format_to(std::back_inserter(line), "ex{} ", ex->id());
    } else {
      fmt::format_to(std::back_inserter(line), "-- ");
    }
    line.append(message);
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  } catch (...) {
    // Logging must never take the process down.
  }
}

}  // namespace sluice::runtime::log
