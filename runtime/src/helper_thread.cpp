// Messages for a helper thread that could not start (see helper_thread.hpp).

#include "helper_thread.hpp"

#include <fmt/format.h>

#include <sys/resource.h>

#include <cstring>

namespace sluice::runtime::detail {

namespace {

std::string mib(std::size_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// The stack a thread started with default attributes gets (RLIMIT_STACK's soft limit, or glibc's
// default when that is unlimited).
std::size_t default_stack_bytes() {
  pthread_attr_t attr;
  std::size_t bytes = 0;
  if (pthread_getattr_default_np(&attr) == 0) {
    (void)pthread_attr_getstacksize(&attr, &bytes);
    pthread_attr_destroy(&attr);
  }
  return bytes;
}

}  // namespace

std::string thread_start_failure(std::string_view what, int err) {
  std::string why = fmt::format("start {}: {}", what, std::strerror(err));
  if (err != EAGAIN && err != ENOMEM) return why;
  const std::size_t stack = default_stack_bytes();
  rlimit as{};
  rlimit threads{};
  const bool as_limited = getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
  const bool threads_limited = getrlimit(RLIMIT_NPROC, &threads) == 0 && threads.rlim_cur != RLIM_INFINITY;
  if (as_limited) {
    why += fmt::format(" (its stack needs {} of address space, and the process's address space is limited to {}: "
                       "ulimit -v {}; raise ulimit -v, or lower the thread stack size with ulimit -s)",
                       mib(stack), mib(as.rlim_cur), as.rlim_cur / 1024);
  } else {
    why += fmt::format(" (its stack needs {} of address space: the memory or the address space ran out, or the "
                       "threads reached a limit: ulimit -u {}, kernel.threads-max)",
                       mib(stack), threads_limited ? fmt::format("{}", threads.rlim_cur) : std::string("unlimited"));
  }
  return why;
}

}  // namespace sluice::runtime::detail
