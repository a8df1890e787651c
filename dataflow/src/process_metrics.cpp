#include "process_metrics.hpp"

#include <sluice/runtime/system.hpp>

#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace sluice::dataflow::detail {

namespace {

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The system's boot time, in seconds since the epoch: the wall clock (the runtime's, system.hpp,
// which a simulation replaces) less the time since boot. The time since boot is the kernel's
// CLOCK_BOOTTIME, the clock /proc's start times count in (suspend included), and a fact of this
// host that no seam models: the endpoint serving it runs only on a real host. Not /proc/stat's
// btime: a unit with ProcSubset=pid sees no /proc/stat.
std::optional<double> boot_time() {
  timespec boot{};
  if (::clock_gettime(CLOCK_BOOTTIME, &boot) != 0) return std::nullopt;
  const double wall = std::chrono::duration<double>(runtime::sys().wall_now().time_since_epoch()).count();
  return wall - (static_cast<double>(boot.tv_sec) + static_cast<double>(boot.tv_nsec) / 1e9);
}

std::uint64_t count_open_fds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  std::uint64_t n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n > 0 ? n - 1 : 0;  // (the listing's own descriptor)
}

}  // namespace

std::optional<process_sample> read_process_sample() {
  // /proc/self/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses, so the
  // fields are counted from the last ')'. After it: field 3 (state) onwards.
  const std::string stat = read_file("/proc/self/stat");
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(stat.substr(close + 1));
  std::string field;
  std::uint64_t utime = 0, stime = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  for (int i = 3; i <= 24 && (in >> field); ++i) {
    try {
      switch (i) {
        case 14: utime = std::stoull(field); break;
        case 15: stime = std::stoull(field); break;
        case 22: start_ticks = std::stoull(field); break;
        case 23: vsize = std::stoull(field); break;
        case 24: rss_pages = std::stoull(field); break;
        default: break;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (ticks <= 0 || page <= 0) return std::nullopt;
  process_sample p;
  p.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(ticks);
  p.resident_bytes = rss_pages * static_cast<std::uint64_t>(page);
  p.virtual_bytes = vsize;
  p.open_fds = count_open_fds();
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) p.max_fds = files.rlim_cur;
  if (const auto boot = boot_time()) {
    p.start_time_seconds = *boot + static_cast<double>(start_ticks) / static_cast<double>(ticks);
  }
  return p;
}

void write_process(io::prometheus_text& out, const process_sample& p) {
  using io::metric_type;
  out.family("process_cpu_seconds_total", metric_type::counter, "Total user and system CPU time spent in seconds.");
  out.sample("process_cpu_seconds_total", {}, p.cpu_seconds);
  out.family("process_resident_memory_bytes", metric_type::gauge, "Resident memory size in bytes.");
  out.sample("process_resident_memory_bytes", {}, p.resident_bytes);
  out.family("process_virtual_memory_bytes", metric_type::gauge, "Virtual memory size in bytes.");
  out.sample("process_virtual_memory_bytes", {}, p.virtual_bytes);
  out.family("process_open_fds", metric_type::gauge, "Number of open file descriptors.");
  out.sample("process_open_fds", {}, p.open_fds);
  if (p.max_fds) {
    out.family("process_max_fds", metric_type::gauge, "Maximum number of open file descriptors.");
    out.sample("process_max_fds", {}, *p.max_fds);
  }
  if (p.start_time_seconds > 0) {
    out.family("process_start_time_seconds", metric_type::gauge,
               "Start time of the process since unix epoch in seconds.");
    out.sample("process_start_time_seconds", {}, p.start_time_seconds);
  }
}

}  // namespace sluice::dataflow::detail
