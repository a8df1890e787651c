// See service_notify.hpp.

#include "service_notify.hpp"

#include <sluice/runtime/log.hpp>

#include <fmt/core.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>

#if SLUICE_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace sluice::apps {

namespace {
// How long a stop may go on without another message (EXTEND_TIMEOUT_USEC): progress reports come
// every 250 ms, so this leaves room for a slow one.
constexpr std::chrono::seconds stop_extension{10};
}  // namespace

service_notify::service_notify() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr || *socket == '\0') return;
#if SLUICE_HAVE_SYSTEMD
  active_ = true;
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) watchdog_ = std::chrono::microseconds(usec);
#else
  runtime::log::warn("NOTIFY_SOCKET is set, but this sluice was built without libsystemd: no notifications");
#endif
}

// The notify protocol (sd_notify(3)) by hand, because libsystemd's sd_notify blocks while the
// service manager's socket queue is full (a busy PID 1 reads late; a unix datagram queue holds 10):
// a blocked notification would hold the job's end for ever. Sent without waiting instead; one that
// does not fit is dropped and counted (the next STATUS= or WATCHDOG=1 says the same).
void service_notify::send(const std::string& message) {
  if (!active_) return;
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || *path == '\0') return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::size_t length = std::strlen(path);
  if (length >= sizeof addr.sun_path) return;
  std::memcpy(addr.sun_path, path, length);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // an abstract socket
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
  const ssize_t sent = ::sendto(fd, message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&addr), size);
  const int error = errno;
  ::close(fd);
  if (sent >= 0) return;
  if (error == EAGAIN || error == EWOULDBLOCK) {
    if (++dropped_ == 1) runtime::log::warn("sd_notify: the service manager's socket is full; notifications are dropped");
    return;
  }
  runtime::log::warn("sd_notify: {}", std::strerror(error));
}

void service_notify::ready(std::optional<snapshot::checkpoint_id> resumed_from) {
  if (!active_) return;
  const std::string status = resumed_from ? fmt::format("running, resumed from checkpoint {}", *resumed_from)
                                          : std::string("running, fresh start");
  send("READY=1\nSTATUS=" + status);
}

void service_notify::progress(const std::string& status, std::chrono::steady_clock::time_point now) {
  if (!active_) return;
  std::string message;
  if (watchdog_ && now - last_ping_ >= *watchdog_ / 4) {
    message += "WATCHDOG=1\n";
    last_ping_ = now;
  }
  if (now - last_status_ >= std::chrono::seconds(1)) {
    message += "STATUS=" + std::string(stopping_ ? "stopping: " : "") + status + "\n";
    last_status_ = now;
    if (stopping_) {
      message += fmt::format("EXTEND_TIMEOUT_USEC={}\n",
                             std::chrono::duration_cast<std::chrono::microseconds>(stop_extension).count());
    }
  }
  if (!message.empty()) send(message);
}

void service_notify::stopping(dataflow::stop_mode mode) {
  if (!active_ || stopping_) return;
  stopping_ = true;
  send(fmt::format("STOPPING=1\nSTATUS={}\nEXTEND_TIMEOUT_USEC={}",
                   mode == dataflow::stop_mode::drain ? "stopping: final checkpoint" : "stopping now",
                   std::chrono::duration_cast<std::chrono::microseconds>(stop_extension).count()));
}

}  // namespace sluice::apps
