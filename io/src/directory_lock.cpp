// directory_lock (see directory_lock.hpp): flock on `<dir>/.sluice-lock`, pid written after the
// lock is taken. Every call goes through the thread's runtime::sys().

#include <sluice/io/directory_lock.hpp>

#include <sluice/io/fs.hpp>
#include <sluice/runtime/system.hpp>

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <optional>
#include <system_error>

namespace sluice::io {

using runtime::sys;

namespace {

std::string quoted(std::string_view what, const std::string& dir) {
  return std::string(what) + " '" + dir + "'";
}

error not_writable(std::string_view what, const std::string& dir, int errno_value) {
  return error::from_errno(errno_value, quoted(what, dir) + " is not writable");
}

void close_fd(int fd) noexcept {
  if (fd >= 0) (void)sys().close(fd);
}

// The pid the holder wrote into the lock file, if it wrote one yet.
std::optional<long> read_pid(int fd) {
  char text[32] = {};
  const ssize_t got = sys().pread(fd, text, sizeof text - 1, 0);
  if (got <= 0) return std::nullopt;
  long pid = 0;
  const char* end = text + got;
  const auto [stop, ec] = std::from_chars(text, end, pid);
  if (ec != std::errc() || stop == text || pid <= 0 || (stop != end && *stop != '\n')) return std::nullopt;
  return pid;
}

// Writes all of `text` at offset 0 of `fd`, replacing what was there. 0 or an errno.
int write_text(int fd, std::string_view text) {
  if (const int rc = sys().ftruncate(fd, 0); rc < 0) return -rc;
  return -write_all_blocking(fd, text, 0);
}

}  // namespace

result<directory_lock> directory_lock::acquire(const std::string& dir, std::string_view what, std::string_view name) {
  const std::string path = dir + "/" + std::string(name);
  runtime::system& os = sys();
  const int fd = os.open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return not_writable(what, dir, -fd);
  const int locked = os.flock(fd, LOCK_EX | LOCK_NB);  // (the host retries EINTR)
  if (locked < 0) {
    const int lock_errno = -locked;
    if (lock_errno != EWOULDBLOCK) {
      close_fd(fd);
      return error::from_errno(lock_errno, "lock " + quoted(what, dir));
    }
    // The holder writes its pid right after taking the lock: give it a moment (bounded).
    std::optional<long> pid = read_pid(fd);
    for (int i = 0; i < 20 && !pid; ++i) {
      (void)os.nanosleep(std::chrono::milliseconds(1));
      pid = read_pid(fd);
    }
    close_fd(fd);
    const std::string holder = pid ? "pid " + std::to_string(*pid) : std::string("pid unknown");
    return error(std::make_error_code(std::errc::resource_unavailable_try_again),
                 quoted(what, dir) + " is in use by another sluice job (" + holder + ")");
  }
  // Ours from here: on any failure below, closing the descriptor releases it.
  if (const int e = write_text(fd, std::to_string(os.getpid()) + "\n"); e != 0) {
    close_fd(fd);
    return not_writable(what, dir, e);
  }
  // The lock file may predate a change of permissions: prove that new entries can be made.
  const std::string probe = dir + "/" + std::string(name) + ".probe";
  const int probe_fd = os.open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (probe_fd < 0) {
    close_fd(fd);
    return not_writable(what, dir, -probe_fd);
  }
  close_fd(probe_fd);
  if (const int rc = os.unlink(probe.c_str()); rc < 0) {
    close_fd(fd);
    return not_writable(what, dir, -rc);
  }
  return directory_lock(dir, fd);
}

directory_lock::directory_lock(directory_lock&& other) noexcept : dir_(std::move(other.dir_)), fd_(other.fd_) {
  other.fd_ = -1;
}

directory_lock& directory_lock::operator=(directory_lock&& other) noexcept {
  if (this != &other) {
    release();
    dir_ = std::move(other.dir_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

directory_lock::~directory_lock() { release(); }

void directory_lock::release() noexcept {
  close_fd(fd_);
  fd_ = -1;
}

}  // namespace sluice::io
