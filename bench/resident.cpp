// peak_resident_growth_bytes (resident.hpp): the child resets its peak resident set to its current
// one (/proc/self/clear_refs, "5"; a forked child may inherit its parent's peak), runs the work and
// reports its resident set at the start and its peak (VmHWM) through a pipe, or the work's error.
// Free heap memory is given back first (malloc_trim): the parent's, resident but free, would take
// the work's allocations without the resident set growing.

#include "resident.hpp"

#include <fmt/core.h>

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

namespace sluice::bench {
namespace {

// A "Vm...:  N kB" line of /proc/self/status, in bytes (0 if missing).
std::uint64_t status_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  std::uint64_t kib = 0;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

bool reset_peak() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

void write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

std::string read_all(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) return s;
    s.append(buf, static_cast<std::size_t>(r));
  }
}

}  // namespace

std::uint64_t peak_resident_growth_bytes(const std::function<void()>& work) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(fmt::format("resident memory: pipe: {}", std::strerror(errno)));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(fmt::format("resident memory: fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::close(fds[0]);
    try {
      ::malloc_trim(0);  // the parent's freed heap, resident yet free, would hide what the work allocates
      if (!reset_peak()) throw std::runtime_error(fmt::format("reset /proc/self/clear_refs: {}", std::strerror(errno)));
      const std::uint64_t start = status_bytes("VmRSS");
      work();
      const std::uint64_t figures[2] = {start, status_bytes("VmHWM")};
      write_all(fds[1], figures, sizeof figures);
    } catch (const std::exception& e) {
      write_all(fds[1], e.what(), std::strlen(e.what()));
      ::_exit(1);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  const std::string report = read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(fmt::format("resident memory: waitpid: {}", std::strerror(errno)));
  }
  std::uint64_t figures[2] = {0, 0};
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && report.size() == sizeof figures;
  if (!ok) {
    const std::string why = WIFEXITED(status) && !report.empty() ? report
                            : WIFSIGNALED(status)                ? fmt::format("killed by signal {}", WTERMSIG(status))
                                                                 : std::string("it exited with an error");
    throw std::runtime_error("resident memory: the measured work failed in its child process: " + why);
  }
  std::memcpy(figures, report.data(), sizeof figures);
  return figures[1] > figures[0] ? figures[1] - figures[0] : 0;
}

}  // namespace sluice::bench
