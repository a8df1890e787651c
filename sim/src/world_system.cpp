// world: descriptors, paths and the synchronous system calls (see world.hpp).

#include <sluice/sim/world.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::sim {

int world::add_descriptor(descriptor d) {
  int fd = first_descriptor;
  for (const auto& [used, entry] : fds_) {
    if (used != fd) break;
    ++fd;
  }
  fds_.emplace(fd, std::move(d));
  return fd;
}

world::descriptor* world::find(int fd) noexcept {
  auto it = fds_.find(fd);
  return it == fds_.end() ? nullptr : &it->second;
}

const world::descriptor* world::find(int fd) const noexcept {
  auto it = fds_.find(fd);
  return it == fds_.end() ? nullptr : &it->second;
}

void world::release_descriptor(int fd) {
  auto it = fds_.find(fd);
  if (it == fds_.end()) return;
  if (it->second.what == descriptor::kind::socket && net_.exists(it->second.socket)) net_.close(it->second.socket);
  for (auto l = locks_.begin(); l != locks_.end();) {
    l = l->second == fd ? locks_.erase(l) : std::next(l);
  }
  fds_.erase(it);
}

bool world::absolute(int dir_fd, const char* path, std::string& out) const {
  if (path == nullptr) return false;
  std::string joined;
  if (path[0] == '/') {
    joined = path;
  } else if (dir_fd == AT_FDCWD) {
    joined = options_.working_directory + "/" + path;
  } else {
    const descriptor* d = find(dir_fd);
    if (d == nullptr || d->what != descriptor::kind::directory) return false;
    joined = d->path + "/" + path;
  }
  return normalize_path(joined, out);
}

int world::open_at(int dir_fd, const char* raw, int flags) {
  std::string path;
  if (!absolute(dir_fd, raw, path)) return -EBADF;
  disk::ino inode = 0;
  int rc = disk_.lookup(path, inode);
  const int access = flags & O_ACCMODE;
  if (rc == -ENOENT && (flags & O_CREAT) != 0) {
    rc = disk_.create(path, (flags & O_EXCL) != 0, inode);
  } else if (rc == 0 && (flags & O_CREAT) != 0 && (flags & O_EXCL) != 0) {
    return -EEXIST;
  }
  if (rc != 0) return rc;
  descriptor d;
  d.inode = inode;
  d.path = path;
  d.access = access;
  d.append = (flags & O_APPEND) != 0;
  if (disk_.is_directory(inode)) {
    if (access != O_RDONLY) return -EISDIR;
    d.what = descriptor::kind::directory;
  } else {
    if ((flags & O_DIRECTORY) != 0) return -ENOTDIR;
    if ((flags & O_TRUNC) != 0 && access != O_RDONLY) {
      if (const int t = disk_.truncate(inode, 0); t != 0) return t;
    }
  }
  return add_descriptor(std::move(d));
}

// --- sockets -------------------------------------------------------------------------------------

int world::socket(int domain, int type, int /*protocol*/) noexcept {
  if (domain != AF_INET && domain != AF_INET6) return -EAFNOSUPPORT;
  if ((type & 0xf) != SOCK_STREAM) return -EPROTONOSUPPORT;
  descriptor d;
  d.what = descriptor::kind::socket;
  d.socket = net_.open(domain);
  d.access = O_RDWR;
  return add_descriptor(std::move(d));
}

int world::setsockopt(int fd, int level, int name, const void* value, socklen_t size) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what != descriptor::kind::socket) return -ENOTSOCK;
  if (level == SOL_SOCKET && name == SO_LINGER && size >= sizeof(linger)) {
    linger l{};
    std::memcpy(&l, value, sizeof l);
    net_.at(d->socket).linger_abort = l.l_onoff != 0 && l.l_linger == 0;
  }
  return 0;
}

int world::getsockopt(int fd, int level, int name, void* value, socklen_t* size) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what != descriptor::kind::socket) return -ENOTSOCK;
  if (level == SOL_SOCKET && name == SO_LINGER && *size >= sizeof(linger)) {
    linger l{};
    l.l_onoff = net_.at(d->socket).linger_abort ? 1 : 0;
    std::memcpy(value, &l, sizeof l);
    *size = sizeof l;
    return 0;
  }
  if (*size >= sizeof(int)) {
    const int zero = 0;
    std::memcpy(value, &zero, sizeof zero);
    *size = sizeof zero;
  }
  return 0;
}

int world::bind(int fd, const sockaddr* addr, socklen_t size) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what != descriptor::kind::socket) return -ENOTSOCK;
  return net_.bind(d->socket, addr, size);
}

int world::listen(int fd, int backlog) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what != descriptor::kind::socket) return -ENOTSOCK;
  return net_.listen(d->socket, backlog);
}

int world::getsockname(int fd, sockaddr* addr, socklen_t* size) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what != descriptor::kind::socket) return -ENOTSOCK;
  const network::socket& s = net_.at(d->socket);
  const socklen_t n = std::min<socklen_t>(*size, s.local_len);
  std::memcpy(addr, &s.local, n);
  *size = s.local_len;
  return 0;
}

int world::shutdown(int fd, int how) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what != descriptor::kind::socket) return -ENOTSOCK;
  return net_.shutdown(d->socket, how);
}

// --- descriptors and files -----------------------------------------------------------------------

int world::close(int fd) noexcept {
  if (find(fd) == nullptr) return -EBADF;
  release_descriptor(fd);
  return 0;
}

int world::open(const char* path, int flags, mode_t /*mode*/) noexcept {
  try {
    return open_at(AT_FDCWD, path, flags);
  } catch (...) {
    return -ENOMEM;
  }
}

ssize_t world::pread(int fd, void* buf, std::size_t len, off_t offset) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what == descriptor::kind::directory) return -EISDIR;
  if (d->what == descriptor::kind::socket) return -ESPIPE;
  return static_cast<ssize_t>(disk_.read(d->inode, buf, len, static_cast<std::uint64_t>(offset)));
}

ssize_t world::pwrite(int fd, const void* buf, std::size_t len, off_t offset) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what == descriptor::kind::directory) return -EISDIR;
  if (d->what == descriptor::kind::socket) return -ESPIPE;
  if (d->access == O_RDONLY) return -EBADF;
  return disk_.write(d->inode, buf, len, static_cast<std::uint64_t>(offset));
}

int world::fsync(int fd) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what == descriptor::kind::socket) return -EINVAL;
  disk_.sync(d->inode);
  return 0;
}

int world::ftruncate(int fd, off_t length) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what != descriptor::kind::file || d->access == O_RDONLY) return -EINVAL;
  return disk_.truncate(d->inode, static_cast<std::uint64_t>(length));
}

namespace {
void fill_stat(const disk& storage, disk::ino inode, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = inode;
  st->st_nlink = 1;
  if (storage.is_directory(inode)) {
    st->st_mode = S_IFDIR | 0755;
  } else {
    st->st_mode = S_IFREG | 0644;
    st->st_size = static_cast<off_t>(storage.size(inode));
    st->st_blksize = block_size;
    st->st_blocks = static_cast<blkcnt_t>((storage.size(inode) + 511) / 512);
  }
}
}  // namespace

int world::fstat(int fd, struct stat* st) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what == descriptor::kind::socket) {
    std::memset(st, 0, sizeof *st);
    st->st_mode = S_IFSOCK | 0777;
    return 0;
  }
  fill_stat(disk_, d->inode, st);
  return 0;
}

int world::flock(int fd, int operation) noexcept {
  descriptor* d = find(fd);
  if (d == nullptr) return -EBADF;
  if (d->what == descriptor::kind::socket) return -EINVAL;
  if ((operation & LOCK_UN) != 0) {
    if (auto it = locks_.find(d->inode); it != locks_.end() && it->second == fd) locks_.erase(it);
    return 0;
  }
  auto it = locks_.find(d->inode);
  if (it != locks_.end() && it->second != fd) return (operation & LOCK_NB) != 0 ? -EWOULDBLOCK : -EDEADLK;
  locks_[d->inode] = fd;
  return 0;
}

// --- paths -------------------------------------------------------------------------------------

int world::stat(const char* path, struct stat* st) noexcept {
  std::string p;
  if (!absolute(AT_FDCWD, path, p)) return -EINVAL;
  disk::ino inode = 0;
  if (const int rc = disk_.lookup(p, inode); rc != 0) return rc;
  fill_stat(disk_, inode, st);
  return 0;
}

int world::lstat(const char* path, struct stat* st) noexcept { return stat(path, st); }

int world::readlink(const char* path, std::string& /*target*/) noexcept {
  struct stat st {};
  const int rc = stat(path, &st);
  return rc < 0 ? rc : -EINVAL;  // every entry exists as itself: none is a symlink
}

int world::mkdir(const char* path, mode_t /*mode*/) noexcept {
  std::string p;
  if (!absolute(AT_FDCWD, path, p)) return -EINVAL;
  return disk_.make_directory(p);
}

int world::unlink(const char* path) noexcept {
  std::string p;
  if (!absolute(AT_FDCWD, path, p)) return -EINVAL;
  return disk_.remove(p, false);
}

int world::rmdir(const char* path) noexcept {
  std::string p;
  if (!absolute(AT_FDCWD, path, p)) return -EINVAL;
  return disk_.remove(p, true);
}

int world::rename(const char* from, const char* to) noexcept {
  std::string a, b;
  if (!absolute(AT_FDCWD, from, a) || !absolute(AT_FDCWD, to, b)) return -EINVAL;
  return disk_.rename(a, b);
}

int world::list_directory(const char* dir, std::vector<std::string>& names, std::size_t max_entries) noexcept {
  std::string p;
  if (!absolute(AT_FDCWD, dir, p)) return -EINVAL;
  try {
    std::vector<std::string> all;
    if (const int rc = disk_.list(p, all); rc != 0) return rc;
    // A real directory lists in no particular order: neither may the simulated one.
    for (std::size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[random_.below(i)]);
    for (std::string& name : all) {
      if (names.size() >= max_entries) return -EFBIG;
      names.push_back(std::move(name));
    }
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

int world::realpath(const char* path, std::string& resolved) noexcept {
  try {
    std::string p;
    if (!absolute(AT_FDCWD, path, p)) return -EINVAL;
    disk::ino inode = 0;
    if (const int rc = disk_.lookup(p, inode); rc != 0) return rc;
    resolved = std::move(p);
    return 0;
  } catch (...) {
    return -ENOMEM;
  }
}

int world::nanosleep(std::chrono::nanoseconds duration) noexcept {
  if (duration.count() > 0) now_ += duration;
  note("sleep", duration.count(), 0);
  return 0;
}

}  // namespace sluice::sim
