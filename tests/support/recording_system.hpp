#pragma once
// recording_system: a runtime::system that does what the host does and writes down every call, to
// show that code goes through runtime::sys(). Path calls are written with their path ("open
// /tmp/x/.sluice-lock"), the others by name ("bind"). Tests subclass it to make a call fail or to
// answer without the kernel.
//
//   recording_system os;
//   { runtime::system_scope scope(os); auto l = io::tcp_listener::listen(io::address::loopback_v4()); }
//   CHECK(os.count("bind") == 1);

#include <sluice/runtime/system.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::test {

class recording_system : public runtime::system {
 public:
  std::vector<std::string> calls;

  // How many calls named `name` were made (whatever their path).
  std::size_t count(std::string_view name) const {
    return static_cast<std::size_t>(
        std::count_if(calls.begin(), calls.end(), [name](const std::string& c) { return is_call(c, name); }));
  }
  // The records of the calls named `name` (path included), in order.
  std::vector<std::string> of(std::string_view name) const {
    std::vector<std::string> out;
    for (const std::string& c : calls) {
      if (is_call(c, name)) out.push_back(c);
    }
    return out;
  }

  int socket(int domain, int type, int protocol) noexcept override {
    note("socket");
    return host().socket(domain, type, protocol);
  }
  int setsockopt(int fd, int level, int name, const void* value, socklen_t size) noexcept override {
    note("setsockopt");
    return host().setsockopt(fd, level, name, value, size);
  }
  int getsockopt(int fd, int level, int name, void* value, socklen_t* size) noexcept override {
    note("getsockopt");
    return host().getsockopt(fd, level, name, value, size);
  }
  int bind(int fd, const sockaddr* addr, socklen_t size) noexcept override {
    note("bind");
    return host().bind(fd, addr, size);
  }
  int listen(int fd, int backlog) noexcept override {
    note("listen");
    return host().listen(fd, backlog);
  }
  int getsockname(int fd, sockaddr* addr, socklen_t* size) noexcept override {
    note("getsockname");
    return host().getsockname(fd, addr, size);
  }
  int shutdown(int fd, int how) noexcept override {
    note("shutdown");
    return host().shutdown(fd, how);
  }

  int close(int fd) noexcept override {
    note("close");
    return host().close(fd);
  }
  int open(const char* path, int flags, mode_t mode) noexcept override {
    note("open", path);
    return host().open(path, flags, mode);
  }
  ssize_t pread(int fd, void* buf, std::size_t len, off_t offset) noexcept override {
    note("pread");
    return host().pread(fd, buf, len, offset);
  }
  ssize_t pwrite(int fd, const void* buf, std::size_t len, off_t offset) noexcept override {
    note("pwrite");
    return host().pwrite(fd, buf, len, offset);
  }
  int fsync(int fd) noexcept override {
    note("fsync");
    return host().fsync(fd);
  }
  int ftruncate(int fd, off_t length) noexcept override {
    note("ftruncate");
    return host().ftruncate(fd, length);
  }
  int fstat(int fd, struct stat* st) noexcept override {
    note("fstat");
    return host().fstat(fd, st);
  }
  int flock(int fd, int operation) noexcept override {
    note("flock");
    return host().flock(fd, operation);
  }

  int stat(const char* path, struct stat* st) noexcept override {
    note("stat", path);
    return host().stat(path, st);
  }
  int lstat(const char* path, struct stat* st) noexcept override {
    note("lstat", path);
    return host().lstat(path, st);
  }
  int readlink(const char* path, std::string& target) noexcept override {
    note("readlink", path);
    return host().readlink(path, target);
  }
  int mkdir(const char* path, mode_t mode) noexcept override {
    note("mkdir", path);
    return host().mkdir(path, mode);
  }
  int unlink(const char* path) noexcept override {
    note("unlink", path);
    return host().unlink(path);
  }
  int rmdir(const char* path) noexcept override {
    note("rmdir", path);
    return host().rmdir(path);
  }
  int rename(const char* from, const char* to) noexcept override {
    note("rename", from);
    return host().rename(from, to);
  }
  int list_directory(const char* dir, std::vector<std::string>& names, std::size_t max_entries) noexcept override {
    note("list_directory", dir);
    return host().list_directory(dir, names, max_entries);
  }
  int realpath(const char* path, std::string& resolved) noexcept override {
    note("realpath", path);
    return host().realpath(path, resolved);
  }
  std::string current_directory() override {
    note("current_directory");
    return host().current_directory();
  }

  int getpid() noexcept override {
    note("getpid");
    return host().getpid();
  }
  int nanosleep(std::chrono::nanoseconds duration) noexcept override {
    note("nanosleep");
    return host().nanosleep(duration);
  }

  std::chrono::system_clock::time_point wall_now() noexcept override {
    note("wall_now");
    return host().wall_now();
  }

 protected:
  static runtime::system& host() noexcept { return runtime::host_system(); }

  // A record is "<name>" or "<name> <path>".
  static bool is_call(std::string_view record, std::string_view name) noexcept {
    return record == name || (record.size() > name.size() && record.starts_with(name) && record[name.size()] == ' ');
  }

  // (A test that runs out of memory here has bigger problems than a lost record.)
  void note(std::string_view call, const char* path = nullptr) noexcept {
    try {
      calls.emplace_back(path == nullptr ? std::string(call) : std::string(call) + " " + path);
    } catch (...) {
    }
  }
};

}  // namespace sluice::test
