// Which I/O backend an executor gets (see make_backend in io_backend.hpp).
//
// auto tries io_uring and falls back to epoll only when the kernel refuses io_uring itself
// (EPERM: seccomp or kernel.io_uring_disabled; EACCES: likewise on some kernels; ENOSYS: no
// io_uring, or a seccomp filter answering ENOSYS); another failure (ENOMEM for the ring) stays an
// error, as it would be with SLUICE_BACKEND=uring. Once io_uring has been refused, later executors
// of the process go straight to epoll. The first backend a process makes is logged once.

#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/log.hpp>

#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace sluice::runtime {

namespace {

enum class setting { automatic, uring, epoll };

setting read_setting() {
  const char* raw = std::getenv("SLUICE_BACKEND");
  const std::string_view value = raw != nullptr ? raw : "";
  if (value.empty() || value == "auto") return setting::automatic;
  if (value == "uring" || value == "io_uring") return setting::uring;
  if (value == "epoll") return setting::epoll;
  throw std::invalid_argument(
      fmt::format("SLUICE_BACKEND={} is not a backend: use auto (io_uring, or epoll where io_uring is "
                  "unavailable), uring or epoll",
                  value));
}

bool refused(int err) noexcept { return err == EPERM || err == EACCES || err == ENOSYS; }

std::string sysctl_disabled() {
  std::ifstream in("/proc/sys/kernel/io_uring_disabled");
  std::string value;
  if (in) std::getline(in, value);
  return value;
}

// The process's first choice, logged once; and whether io_uring was refused (then auto skips it).
std::mutex state_mutex;
bool logged = false;
bool uring_refused = false;

void log_once(const backend_choice& choice, bool fallback) {
  std::lock_guard lock(state_mutex);
  if (logged) return;
  logged = true;
  if (fallback) {
    log::warn("I/O backend: epoll, because {}", choice.reason);
  } else {
    log::info("I/O backend: {} ({})", choice.name, choice.reason);
  }
}

}  // namespace

backend_choice choose_backend() {
  switch (read_setting()) {
    case setting::uring: return {"io_uring", "SLUICE_BACKEND=uring"};
    case setting::epoll: return {"epoll", "SLUICE_BACKEND=epoll"};
    case setting::automatic: break;
  }
  io_uring_params params{};
  const long fd = ::syscall(__NR_io_uring_setup, 1, &params);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return {"io_uring", "SLUICE_BACKEND=auto, and io_uring is available"};
  }
  const int err = errno;
  if (!refused(err)) return {"io_uring", "SLUICE_BACKEND=auto (io_uring_setup failed, but not as refused)"};
  return {"epoll", detail::describe_uring_setup_failure(err, sysctl_disabled())};
}

std::unique_ptr<io_backend> make_backend(const uring_options& options) {
  switch (read_setting()) {
    case setting::uring: {
      auto backend = make_uring_backend(options);
      log_once({"io_uring", "SLUICE_BACKEND=uring"}, false);
      return backend;
    }
    case setting::epoll: {
      auto backend = make_epoll_backend(options);
      log_once({"epoll", "SLUICE_BACKEND=epoll"}, false);
      return backend;
    }
    case setting::automatic: break;
  }
  {
    std::unique_lock lock(state_mutex);
    if (uring_refused) {
      lock.unlock();
      return make_epoll_backend(options);
    }
  }
  try {
    auto backend = make_uring_backend(options);
    log_once({"io_uring", "SLUICE_BACKEND=auto"}, false);
    return backend;
  } catch (const std::system_error& e) {
    if (e.code().category() != std::generic_category() || !refused(e.code().value())) throw;
    {
      std::lock_guard lock(state_mutex);
      uring_refused = true;
    }
    auto backend = make_epoll_backend(options);
    log_once({"epoll", e.what()}, true);
    return backend;
  }
}

}  // namespace sluice::runtime
