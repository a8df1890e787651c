// SLUICE_ASSERT's failure path (see assert.hpp): one log line, the log flushed, then abort.

#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/format.h>

#include <cstdlib>

namespace sluice::runtime::detail {

void assertion_failed(const char* file, int line, const char* condition, const char* message) noexcept {
  try {
    // Written whatever the log level: this is the last line the process writes.
    log::write(log_level::error, fmt::format("assertion failed at {}:{}: {}: {}", file, line, condition, message));
  } catch (...) {
    // Formatting failed (out of memory): abort all the same.
  }
  log::flush();  // the queued lines, this one last (bounded: a stuck stderr does not stop the abort)
  std::abort();
}

}  // namespace sluice::runtime::detail
