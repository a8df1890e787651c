// A directory held open, its entries changed relative to its descriptor (see directory.hpp).

#include <sluice/io/directory.hpp>

#include "fd_ops.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <utility>

namespace sluice::io {

using runtime::io_op;
using runtime::op_code;
using runtime::submit_op;

namespace {

std::string quoted(const char* op, const std::string& path) { return std::string(op) + " '" + path + "'"; }

// One component, so a call never leaves the directory.
bool is_entry_name(const std::string& name) noexcept {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

error bad_name(const char* op, const std::string& dir, const std::string& name) {
  return error(std::make_error_code(std::errc::invalid_argument),
               quoted(op, dir + "/" + name) + ": not one entry of the directory");
}

runtime::task<result<file_status>> statx_of(int dir_fd, std::string path, std::string shown) {
  struct statx st {};
  io_op op = detail::make_op(op_code::statx, dir_fd);
  op.path = path.c_str();
  op.flags = AT_SYMLINK_NOFOLLOW;
  op.mode = STATX_TYPE | STATX_MODE | STATX_SIZE;
  op.buf = &st;
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, quoted("stat", shown));
  co_return file_status{static_cast<std::uint64_t>(st.stx_size), static_cast<unsigned>(st.stx_mode)};
}

}  // namespace

directory::directory(directory&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

directory& directory::operator=(directory&& other) noexcept {
  if (this != &other) {
    close_now();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

directory::~directory() { close_now(); }

void directory::close_now() noexcept {
  if (fd_ >= 0) detail::close_now(std::exchange(fd_, -1));
}

runtime::task<result<directory>> directory::open_no_follow(std::string path) {
  io_op op = detail::make_op(op_code::openat, AT_FDCWD);
  op.path = path.c_str();
  op.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  const std::int32_t rc = co_await submit_op(op, /*yields_fd=*/true);
  if (rc == -ELOOP || rc == -ENOTDIR) {
    // (O_DIRECTORY with O_NOFOLLOW answers ENOTDIR for a symlink: say which it is)
    auto st = co_await statx_of(AT_FDCWD, path, path);
    if (rc == -ELOOP || (st && S_ISLNK(st->mode))) {
      co_return error(std::error_code(ELOOP, std::system_category()),
                      quoted("open directory", path) + ": it is a symbolic link, not followed");
    }
  }
  if (rc < 0) co_return error::from_errno(-rc, quoted("open directory", path));
  co_return directory(rc, std::move(path));
}

runtime::task<result<file_status>> directory::entry_status(std::string name) const {
  if (fd_ < 0) co_return detail::closed_error(quoted("stat", path_ + "/" + name));
  if (!is_entry_name(name)) co_return bad_name("stat", path_, name);
  co_return co_await statx_of(fd_, name, path_ + "/" + name);
}

runtime::task<result<void>> directory::remove(std::string name) {
  if (fd_ < 0) co_return detail::closed_error(quoted("unlink", path_ + "/" + name));
  if (!is_entry_name(name)) co_return bad_name("unlink", path_, name);
  io_op op = detail::make_op(op_code::unlinkat, fd_);
  op.path = name.c_str();
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, quoted("unlink", path_ + "/" + name));
  co_return success();
}

runtime::task<result<void>> directory::close() {
  if (fd_ < 0) co_return success();
  const int fd = std::exchange(fd_, -1);  // released first, whatever happens below
  std::int32_t rc = co_await detail::close_op(fd);
  rc = detail::finish_close(fd, rc);
  if (rc < 0) co_return error::from_errno(-rc, quoted("close directory", path_));
  co_return success();
}

runtime::task<result<file_status>> entry_status(std::string path) {
  co_return co_await statx_of(AT_FDCWD, path, path);
}

}  // namespace sluice::io
