#pragma once
// The synchronous half of the OS seam. Everything sluice asks the kernel outside io_uring (making a
// socket, binding, listing a directory, a file's size, a lock, the wall clock) goes through the
// calling thread's current `system`. By default that is the real kernel; the simulation installs
// its own world for the thread it runs on (system_scope), so a job under simulation touches no real
// file, socket or clock. The asynchronous half is io_backend.
//
// Every call returns what the syscall returns on success (>= 0) and -errno on failure: it never
// sets errno and never throws.

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::runtime {

class system {
 public:
  virtual ~system() = default;

  // Sockets.
  virtual int socket(int domain, int type, int protocol) noexcept = 0;
  virtual int setsockopt(int fd, int level, int name, const void* value, socklen_t size) noexcept = 0;
  virtual int getsockopt(int fd, int level, int name, void* value, socklen_t* size) noexcept = 0;
  virtual int bind(int fd, const sockaddr* addr, socklen_t size) noexcept = 0;
  virtual int listen(int fd, int backlog) noexcept = 0;
  virtual int getsockname(int fd, sockaddr* addr, socklen_t* size) noexcept = 0;
  virtual int shutdown(int fd, int how) noexcept = 0;

  // Descriptors and files.
  virtual int close(int fd) noexcept = 0;
  virtual int open(const char* path, int flags, mode_t mode) noexcept = 0;
  virtual ssize_t pread(int fd, void* buf, std::size_t len, off_t offset) noexcept = 0;
  virtual ssize_t pwrite(int fd, const void* buf, std::size_t len, off_t offset) noexcept = 0;
  virtual int fsync(int fd) noexcept = 0;
  virtual int ftruncate(int fd, off_t length) noexcept = 0;
  virtual int fstat(int fd, struct stat* st) noexcept = 0;
  virtual int flock(int fd, int operation) noexcept = 0;

  // Paths.
  virtual int stat(const char* path, struct stat* st) noexcept = 0;
  // lstat(2): a symbolic link itself, not what it points to.
  virtual int lstat(const char* path, struct stat* st) noexcept = 0;
  // readlink(2): the target a symbolic link holds (-EINVAL for anything else).
  virtual int readlink(const char* path, std::string& target) noexcept = 0;
  virtual int mkdir(const char* path, mode_t mode) noexcept = 0;
  virtual int unlink(const char* path) noexcept = 0;
  virtual int rmdir(const char* path) noexcept = 0;
  virtual int rename(const char* from, const char* to) noexcept = 0;
  // Appends the names in `dir` other than "." and "..", in the order the directory gives them;
  // -EFBIG once more than `max_entries` were seen.
  virtual int list_directory(const char* dir, std::vector<std::string>& names, std::size_t max_entries) noexcept = 0;
  // realpath(3): `path` made absolute, with every symlink, "." and ".." resolved; every component
  // must exist.
  virtual int realpath(const char* path, std::string& resolved) noexcept = 0;
  // The process's working directory (absolute paths are made against it).
  virtual std::string current_directory() = 0;

  // The process: its id (what a directory lock records for whoever it refuses).
  virtual int getpid() noexcept = 0;
  // Blocks the calling thread for `duration` (a bounded wait at start-up, never on an executor's
  // turn); 0, or -errno.
  virtual int nanosleep(std::chrono::nanoseconds duration) noexcept = 0;

  // The wall clock (what a manifest's timestamp records).
  virtual std::chrono::system_clock::time_point wall_now() noexcept = 0;

  // 64 random bits (what names a sink's run, dataflow::sink_recovery): getrandom() on the host; the
  // simulation draws them from its seed, so a seed replays the same names.
  virtual std::uint64_t random_bits() noexcept;
};

// The real kernel.
system& host_system() noexcept;

// The calling thread's system: the host unless a system_scope is active on this thread.
system& current_system() noexcept;

// Installs `s` as the calling thread's system while it lives (scopes nest).
class system_scope {
 public:
  explicit system_scope(system& s) noexcept;
  ~system_scope();
  system_scope(const system_scope&) = delete;
  system_scope& operator=(const system_scope&) = delete;

 private:
  system* previous_;
};

// Shorthand used across the modules: `sys().open(...)`.
inline system& sys() noexcept { return current_system(); }

}  // namespace sluice::runtime
