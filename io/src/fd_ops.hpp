#pragma once
// Private helpers shared by file.cpp and tcp.cpp: building ops, closing descriptors without leaks.

#include <sluice/io/result.hpp>
#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/system.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace sluice::io::detail {

// Linux transfers at most this many bytes per read/write/send/recv (MAX_RW_COUNT); it also keeps
// the byte count inside the int32 completion result.
inline constexpr std::size_t max_op_bytes = 0x7ffff000;

inline std::uint32_t op_len(std::size_t bytes) noexcept {
  return static_cast<std::uint32_t>(bytes < max_op_bytes ? bytes : max_op_bytes);
}

inline runtime::io_op make_op(runtime::op_code code, int fd) noexcept {
  runtime::io_op op;
  op.code = code;
  op.fd = fd;
  return op;
}

// A read/write/send/recv of up to `bytes` at `buf`; files add an offset, sockets MSG_* flags.
inline runtime::io_op data_op(runtime::op_code code, int fd, const void* buf, std::size_t bytes) noexcept {
  runtime::io_op op = make_op(code, fd);
  op.buf = const_cast<void*>(buf);
  op.len = op_len(bytes);
  return op;
}

// A synchronous close, through the thread's system, on the calling thread: only for an object
// destroyed while open (its destructor cannot await), never on the normal path. It does not wait
// for I/O on a local disk, but close(2) of a file written on NFS flushes it to the server.
// (EINTR still closed the descriptor on Linux, so the host counts it as success.)
inline std::int32_t close_now(int fd) noexcept { return runtime::sys().close(fd); }

// The close op of the normal path: through the ring, and not cancelled by a stopping task (a
// close that never ran would leave the descriptor to close_now on the executor).
inline runtime::unstoppable_io_awaitable close_op(int fd) noexcept {
  return runtime::submit_unstoppable(make_op(runtime::op_code::close, fd));
}

// After a close op completed with `rc`: a close that never ran (cancelled before it started: only a
// cancel of the op itself, which nothing sends) left the descriptor open, so close it now. Returns
// the final result.
inline std::int32_t finish_close(int fd, std::int32_t rc) noexcept { return rc == -ECANCELED ? close_now(fd) : rc; }

// Owns a descriptor inside a coroutine until it is handed over; closes it synchronously otherwise.
class unique_fd {
 public:
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() {
    if (fd_ >= 0) close_now(fd_);
  }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// "<context>: Bad file descriptor (already closed)": using a closed or moved-from object.
inline io::error closed_error(std::string context) {
  return io::error(std::error_code(EBADF, std::system_category()), std::move(context) + ": Bad file descriptor (already closed)");
}

}  // namespace sluice::io::detail
