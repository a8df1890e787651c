// wait_fd: a one-shot readiness wait through the backend (see wait_fd.hpp).

#include <sluice/io/wait_fd.hpp>

#include "fd_ops.hpp"

#include <cerrno>
#include <string>

namespace sluice::io {

runtime::task<result<unsigned>> wait_fd(int fd, unsigned events) {
  runtime::io_op op = detail::make_op(runtime::op_code::poll, fd);
  op.flags = events;
  const std::int32_t rc = co_await runtime::submit_op(op);
  if (rc < 0) {
    std::string what = "wait for descriptor " + std::to_string(fd) + " to be ready";
    if (rc == -EOPNOTSUPP) what += " (the I/O backend has no readiness waits: the simulation does not support them)";
    co_return error::from_errno(-rc, what);
  }
  co_return static_cast<unsigned>(rc);
}

}  // namespace sluice::io
