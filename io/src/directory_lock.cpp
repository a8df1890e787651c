// directory_lock (see directory_lock.hpp): flock on `<dir>/.sluice-lock`, pid written after the
// lock is taken.

#include <sluice/io/directory_lock.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>

namespace sluice::io {

namespace {

std::string quoted(std::string_view what, const std::string& dir) {
  return std::string(what) + " '" + dir + "'";
}

error not_writable(std::string_view what, const std::string& dir, int errno_value) {
  return error::from_errno(errno_value, quoted(what, dir) + " is not writable");
}

void close_fd(int fd) noexcept {
  if (fd >= 0) (void)::close(fd);
}

// The pid the holder wrote into the lock file, if it wrote one yet.
std::optional<long> read_pid(int fd) {
  char text[32] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  if (got <= 0) return std::nullopt;
  long pid = 0;
  const char* end = text + got;
  const auto [stop, ec] = std::from_chars(text, end, pid);
  if (ec != std::errc() || stop == text || pid <= 0 || (stop != end && *stop != '\n')) return std::nullopt;
  return pid;
}

// Writes all of `text` at offset 0 of `fd`, replacing what was there.
int write_text(int fd, std::string_view text) {
  if (::ftruncate(fd, 0) != 0) return errno;
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace

result<directory_lock> directory_lock::acquire(const std::string& dir, std::string_view what) {
  const std::string path = dir + "/" + std::string(file_name);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return not_writable(what, dir, errno);
  int locked = 0;
  do {
    locked = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (locked != 0 && errno == EINTR);
  if (locked != 0) {
    const int lock_errno = errno;
    if (lock_errno != EWOULDBLOCK) {
      close_fd(fd);
      return error::from_errno(lock_errno, "lock " + quoted(what, dir));
    }
    // The holder writes its pid right after taking the lock: give it a moment (bounded).
    std::optional<long> pid = read_pid(fd);
    for (int i = 0; i < 20 && !pid; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      pid = read_pid(fd);
    }
    close_fd(fd);
    const std::string holder = pid ? "pid " + std::to_string(*pid) : std::string("pid unknown");
    return error(std::make_error_code(std::errc::resource_unavailable_try_again),
                 quoted(what, dir) + " is in use by another sluice job (" + holder + ")");
  }
  // Ours from here: on any failure below, closing the descriptor releases it.
  if (const int e = write_text(fd, std::to_string(::getpid()) + "\n"); e != 0) {
    close_fd(fd);
    return not_writable(what, dir, e);
  }
  // The lock file may predate a change of permissions: prove that new entries can be made.
  const std::string probe = dir + "/" + std::string(probe_file_name);
  const int probe_fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (probe_fd < 0) {
    const int e = errno;
    close_fd(fd);
    return not_writable(what, dir, e);
  }
  close_fd(probe_fd);
  if (::unlink(probe.c_str()) != 0) {
    const int e = errno;
    close_fd(fd);
    return not_writable(what, dir, e);
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
