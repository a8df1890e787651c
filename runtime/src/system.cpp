// The host system: the real kernel behind system.hpp, and the per-thread current system.

#include <sluice/runtime/system.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

namespace sluice::runtime {

namespace {

int rc_of(int rc) noexcept { return rc < 0 ? -errno : rc; }
ssize_t rc_of(ssize_t rc) noexcept { return rc < 0 ? -errno : rc; }

class host final : public system {
 public:
  int socket(int domain, int type, int protocol) noexcept override { return rc_of(::socket(domain, type, protocol)); }
  int setsockopt(int fd, int level, int name, const void* value, socklen_t size) noexcept override {
    return rc_of(::setsockopt(fd, level, name, value, size));
  }
  int getsockopt(int fd, int level, int name, void* value, socklen_t* size) noexcept override {
    return rc_of(::getsockopt(fd, level, name, value, size));
  }
  int bind(int fd, const sockaddr* addr, socklen_t size) noexcept override { return rc_of(::bind(fd, addr, size)); }
  int listen(int fd, int backlog) noexcept override { return rc_of(::listen(fd, backlog)); }
  int getsockname(int fd, sockaddr* addr, socklen_t* size) noexcept override {
    return rc_of(::getsockname(fd, addr, size));
  }
  int shutdown(int fd, int how) noexcept override { return rc_of(::shutdown(fd, how)); }

  int close(int fd) noexcept override {
    // EINTR still closed the descriptor on Linux.
    if (::close(fd) == 0 || errno == EINTR) return 0;
    return -errno;
  }
  int open(const char* path, int flags, mode_t mode) noexcept override { return rc_of(::open(path, flags, mode)); }
  ssize_t pread(int fd, void* buf, std::size_t len, off_t offset) noexcept override {
    return rc_of(::pread(fd, buf, len, offset));
  }
  ssize_t pwrite(int fd, const void* buf, std::size_t len, off_t offset) noexcept override {
    return rc_of(::pwrite(fd, buf, len, offset));
  }
  int fsync(int fd) noexcept override { return rc_of(::fsync(fd)); }
  int ftruncate(int fd, off_t length) noexcept override { return rc_of(::ftruncate(fd, length)); }
  int fstat(int fd, struct stat* st) noexcept override { return rc_of(::fstat(fd, st)); }
  int flock(int fd, int operation) noexcept override {
    int rc;
    do {
      rc = ::flock(fd, operation);
    } while (rc != 0 && errno == EINTR);
    return rc_of(rc);
  }

  int stat(const char* path, struct stat* st) noexcept override { return rc_of(::stat(path, st)); }
  int lstat(const char* path, struct stat* st) noexcept override { return rc_of(::lstat(path, st)); }
  int readlink(const char* path, std::string& target) noexcept override {
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(path, buf, sizeof buf);
    if (n < 0) return -errno;
    try {
      target.assign(buf, static_cast<std::size_t>(n));
    } catch (...) {
      return -ENOMEM;
    }
    return 0;
  }
  int mkdir(const char* path, mode_t mode) noexcept override { return rc_of(::mkdir(path, mode)); }
  int unlink(const char* path) noexcept override { return rc_of(::unlink(path)); }
  int rmdir(const char* path) noexcept override { return rc_of(::rmdir(path)); }
  int rename(const char* from, const char* to) noexcept override { return rc_of(::rename(from, to)); }
  int list_directory(const char* dir, std::vector<std::string>& names, std::size_t max_entries) noexcept override {
    DIR* d = ::opendir(dir);
    if (d == nullptr) return -errno;
    try {
      for (;;) {
        errno = 0;
        const dirent* entry = ::readdir(d);
        if (entry == nullptr) break;
        if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
        if (names.size() >= max_entries) {
          ::closedir(d);
          return -EFBIG;
        }
        names.emplace_back(entry->d_name);
      }
    } catch (...) {
      ::closedir(d);
      return -ENOMEM;
    }
    const int error = errno;
    ::closedir(d);
    return error == 0 ? 0 : -error;
  }
  int realpath(const char* path, std::string& resolved) noexcept override {
    char buf[PATH_MAX];
    if (::realpath(path, buf) == nullptr) return -errno;
    try {
      resolved = buf;
    } catch (...) {
      return -ENOMEM;
    }
    return 0;
  }
  std::string current_directory() override {
    char buf[PATH_MAX];
    if (::getcwd(buf, sizeof buf) == nullptr) return "/";
    return buf;
  }

  int getpid() noexcept override { return static_cast<int>(::getpid()); }
  int nanosleep(std::chrono::nanoseconds duration) noexcept override {
    if (duration.count() <= 0) return 0;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(duration);
    timespec left{static_cast<time_t>(seconds.count()), static_cast<long>((duration - seconds).count())};
    // EINTR: sleep what is left (bounded: `left` shrinks).
    while (::nanosleep(&left, &left) != 0) {
      if (errno != EINTR) return -errno;
    }
    return 0;
  }

  std::chrono::system_clock::time_point wall_now() noexcept override { return std::chrono::system_clock::now(); }
};

constinit thread_local system* current = nullptr;

}  // namespace

std::uint64_t system::random_bits() noexcept {
  std::uint64_t bits = 0;
  auto* at = reinterpret_cast<unsigned char*>(&bits);
  std::size_t got = 0;
  while (got < sizeof bits) {
    const ssize_t n = ::getrandom(at + got, sizeof bits - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
    else if (errno != EINTR) break;  // (no entropy source at all: what was read, and the clock)
  }
  if (got < sizeof bits) bits ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return bits;
}

system& host_system() noexcept {
  static host h;
  return h;
}

system& current_system() noexcept { return current != nullptr ? *current : host_system(); }

system_scope::system_scope(system& s) noexcept : previous_(current) { current = &s; }
system_scope::~system_scope() { current = previous_; }

}  // namespace sluice::runtime
