// Files through the ring (see file.hpp). Each operation is one backend op; its error names the
// operation and the path, and is built only on failure.

#include <sluice/io/file.hpp>

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

error invalid_options(const std::string& path, const char* why) {
  return error(std::make_error_code(std::errc::invalid_argument), quoted("open", path) + ": invalid open_options: " + why);
}

// Returns the open(2) flags, or an error message for a contradictory set of options.
const char* to_flags(const open_options& o, int& flags) noexcept {
  flags = O_CLOEXEC;
  if (o.read && o.write) {
    flags |= O_RDWR;
  } else if (o.write) {
    flags |= O_WRONLY;
  } else if (o.read) {
    flags |= O_RDONLY;
  } else {
    return "neither read nor write";
  }
  if (o.truncate && !o.write) return "truncate needs write";
  if (o.append && !o.write) return "append needs write";
  if (o.exclusive && !o.create) return "exclusive needs create";
  if (o.create) flags |= O_CREAT;
  if (o.truncate) flags |= O_TRUNC;
  if (o.exclusive) flags |= O_EXCL;
  if (o.append) flags |= O_APPEND;
  return nullptr;
}

io_op data_op(op_code code, int fd, const void* buf, std::size_t bytes, std::uint64_t offset) noexcept {
  io_op op = detail::data_op(code, fd, buf, bytes);
  op.offset = offset;
  return op;
}

}  // namespace

file::file(file&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

file& file::operator=(file&& other) noexcept {
  if (this != &other) {
    close_now();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

file::~file() { close_now(); }

void file::close_now() noexcept {
  if (fd_ >= 0) detail::close_now(std::exchange(fd_, -1));
}

runtime::task<result<file>> file::open(std::string path, open_options options) {
  int flags = 0;
  if (const char* why = to_flags(options, flags)) co_return invalid_options(path, why);
  io_op op = detail::make_op(op_code::openat, AT_FDCWD);
  op.path = path.c_str();
  op.flags = static_cast<std::uint32_t>(flags);
  op.mode = options.mode;
  // yields_fd: a descriptor that arrives after a cancel is closed by the runtime.
  const std::int32_t rc = co_await submit_op(op, /*yields_fd=*/true);
  if (rc < 0) co_return error::from_errno(-rc, quoted("open", path));
  co_return file(rc, std::move(path));
}

runtime::task<result<std::size_t>> file::read_at(std::span<std::byte> buffer, std::uint64_t offset) {
  if (fd_ < 0) co_return detail::closed_error(quoted("read", path_));
  if (buffer.empty()) co_return std::size_t{0};
  const std::int32_t rc = co_await submit_op(
      [&]() noexcept { return data_op(op_code::read, fd_, buffer.data(), buffer.size(), offset); });
  if (rc < 0) co_return error::from_errno(-rc, quoted("read", path_));
  co_return static_cast<std::size_t>(rc);
}

runtime::task<result<std::size_t>> file::write_at(std::span<const std::byte> data, std::uint64_t offset) {
  if (fd_ < 0) co_return detail::closed_error(quoted("write", path_));
  if (data.empty()) co_return std::size_t{0};
  const std::int32_t rc = co_await submit_op(
      [&]() noexcept { return data_op(op_code::write, fd_, data.data(), data.size(), offset); });
  if (rc < 0) co_return error::from_errno(-rc, quoted("write", path_));
  co_return static_cast<std::size_t>(rc);
}

runtime::task<result<void>> file::write_all(std::span<const std::byte> data, std::uint64_t offset) {
  while (!data.empty()) {
    if (fd_ < 0) co_return detail::closed_error(quoted("write", path_));
    const std::int32_t rc = co_await submit_op(
        [&]() noexcept { return data_op(op_code::write, fd_, data.data(), data.size(), offset); });
    if (rc < 0) co_return error::from_errno(-rc, quoted("write", path_));
    if (rc == 0) {
      co_return error::from_code(errc::no_progress,
                                 quoted("write", path_) + " at offset " + std::to_string(offset));
    }
    const auto n = static_cast<std::size_t>(rc);
    data = data.subspan(n);
    offset += n;
  }
  co_return success();
}

runtime::task<result<std::size_t>> file::read_full(std::span<std::byte> buffer, std::uint64_t offset) {
  std::size_t total = 0;
  while (total < buffer.size()) {
    if (fd_ < 0) co_return detail::closed_error(quoted("read", path_));
    const std::size_t want = buffer.size() - total;
    const std::int32_t rc = co_await submit_op(
        [&]() noexcept { return data_op(op_code::read, fd_, buffer.data() + total, want, offset + total); });
    if (rc < 0) co_return error::from_errno(-rc, quoted("read", path_));
    if (rc == 0) break;  // end of file
    total += static_cast<std::size_t>(rc);
  }
  co_return total;
}

runtime::task<result<void>> file::fsync() {
  if (fd_ < 0) co_return detail::closed_error(quoted("fsync", path_));
  const std::int32_t rc = co_await submit_op(detail::make_op(op_code::fsync, fd_));
  if (rc < 0) co_return error::from_errno(-rc, quoted("fsync", path_));
  co_return success();
}

runtime::task<result<void>> file::fdatasync() {
  if (fd_ < 0) co_return detail::closed_error(quoted("fdatasync", path_));
  const std::int32_t rc = co_await submit_op(detail::make_op(op_code::fdatasync, fd_));
  if (rc < 0) co_return error::from_errno(-rc, quoted("fdatasync", path_));
  co_return success();
}

runtime::task<result<void>> file::close() {
  if (fd_ < 0) co_return success();
  // Released first: whatever happens below, this object no longer owns the descriptor.
  const int fd = std::exchange(fd_, -1);
  std::int32_t rc = co_await detail::close_op(fd);
  rc = detail::finish_close(fd, rc);
  if (rc < 0) co_return error::from_errno(-rc, quoted("close", path_));
  co_return success();
}

runtime::task<result<file_status>> file::status() const {
  if (fd_ < 0) co_return detail::closed_error(quoted("stat", path_));
  struct statx st {};
  io_op op = detail::make_op(op_code::statx, fd_);
  op.path = "";  // with AT_EMPTY_PATH: the descriptor itself
  op.flags = AT_EMPTY_PATH;
  op.mode = STATX_TYPE | STATX_MODE | STATX_SIZE;
  op.buf = &st;
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, quoted("stat", path_));
  co_return file_status{static_cast<std::uint64_t>(st.stx_size), static_cast<unsigned>(st.stx_mode)};
}

runtime::task<result<std::uint64_t>> file::size() const {
  auto st = co_await status();
  if (!st) co_return std::move(st).error();
  co_return st->size_bytes;
}

runtime::task<result<void>> rename(std::string from, std::string to) {
  io_op op = detail::make_op(op_code::renameat, AT_FDCWD);
  op.path = from.c_str();
  op.fd2 = AT_FDCWD;
  op.path2 = to.c_str();
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, quoted("rename", from) + " to '" + to + "'");
  co_return success();
}

runtime::task<result<void>> fsync_directory(std::string dir) {
  io_op open_op = detail::make_op(op_code::openat, AT_FDCWD);
  open_op.path = dir.c_str();
  open_op.flags = O_DIRECTORY | O_RDONLY | O_CLOEXEC;
  const std::int32_t fd = co_await submit_op(open_op, /*yields_fd=*/true);
  if (fd < 0) co_return error::from_errno(-fd, quoted("open directory", dir));
  detail::unique_fd owned(fd);
  const std::int32_t synced = co_await submit_op(detail::make_op(op_code::fsync, fd));
  owned.release();  // the close below consumes it, whatever happens
  std::int32_t closed = co_await detail::close_op(fd);
  closed = detail::finish_close(fd, closed);
  if (synced < 0) co_return error::from_errno(-synced, quoted("fsync directory", dir));
  if (closed < 0) co_return error::from_errno(-closed, quoted("close directory", dir));
  co_return success();
}

}  // namespace sluice::io
