// The watchdog over a simulated process (see sim_watchdog.hpp).

#include "sim_watchdog.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <new>
#include <string>
#include <system_error>

namespace sluice::apps::simulate {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "a step count shared between processes");

shared_steps::shared_steps() {
  void* p = ::mmap(nullptr, sizeof(std::atomic<std::uint64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
  if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap of the shared step count");
  count_ = new (p) std::atomic<std::uint64_t>(0);
}

shared_steps::~shared_steps() { ::munmap(count_, sizeof(std::atomic<std::uint64_t>)); }

std::chrono::milliseconds cpu_time_of(pid_t pid) {
  std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (f == nullptr) return std::chrono::milliseconds(0);
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string stat(buf, n);
  // After the command's closing parenthesis (a command may hold spaces and parentheses): fields 3 on;
  // utime and stime are fields 14 and 15, in clock ticks.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::chrono::milliseconds(0);
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2) {
    return std::chrono::milliseconds(0);
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return std::chrono::milliseconds((utime + stime) * 1000 / static_cast<unsigned long long>(ticks > 0 ? ticks : 100));
}

watched_read read_watching(int fd, pid_t child, const std::atomic<std::uint64_t>& steps, watch_limits limits) {
  using clock = std::chrono::steady_clock;
  watched_read out;
  std::uint64_t seen = steps.load(std::memory_order_relaxed);
  clock::time_point since = clock::now();
  std::chrono::milliseconds cpu_since = cpu_time_of(child);
  const auto shortest = std::min(limits.cpu, limits.wall);
  const int poll_ms = static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(shortest.count() / 4, 1, 1000));
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, poll_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready > 0) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the child closed its end: it is done
      out.bytes.append(buf, static_cast<std::size_t>(n));
    }
    const std::uint64_t now_at = steps.load(std::memory_order_relaxed);
    if (now_at != seen) {
      seen = now_at;
      since = clock::now();
      cpu_since = cpu_time_of(child);
      continue;
    }
    const bool spun = cpu_time_of(child) - cpu_since >= limits.cpu;
    if (spun || clock::now() - since >= limits.wall) {
      out.stuck = spun ? watched_read::spinning : watched_read::blocked;
      out.stuck_at_step = seen;
      ::kill(child, SIGKILL);
      break;
    }
  }
  return out;
}

}  // namespace sluice::apps::simulate
