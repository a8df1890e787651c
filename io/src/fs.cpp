// Directory-entry operations through the ring (see fs.hpp): each is one backend op; and the
// directory listing, offloaded to the executor's blocking-work pool.

#include <sluice/io/fs.hpp>

#include "fd_ops.hpp"

#include <sluice/runtime/offload.hpp>

#include <fcntl.h>

#include <optional>

namespace sluice::io {

using runtime::io_op;
using runtime::op_code;
using runtime::submit_op;

namespace {

std::string quoted(const char* op, const std::string& path) { return std::string(op) + " '" + path + "'"; }

}  // namespace

runtime::task<result<void>> make_directory(std::string path, unsigned mode) {
  io_op op = detail::make_op(op_code::mkdirat, AT_FDCWD);
  op.path = path.c_str();
  op.mode = mode;
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, quoted("mkdir", path));
  co_return success();
}

runtime::task<result<void>> remove(std::string path) {
  io_op op = detail::make_op(op_code::unlinkat, AT_FDCWD);
  op.path = path.c_str();
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, quoted("unlink", path));
  co_return success();
}

runtime::task<result<void>> remove_directory(std::string path) {
  io_op op = detail::make_op(op_code::unlinkat, AT_FDCWD);
  op.path = path.c_str();
  op.flags = AT_REMOVEDIR;
  const std::int32_t rc = co_await submit_op(op);
  if (rc < 0) co_return error::from_errno(-rc, quoted("rmdir", path));
  co_return success();
}

runtime::task<result<std::vector<std::string>>> list_directory(std::string dir) {
  std::optional<result<std::vector<std::string>>> listed;
  // A named callable (offload.hpp): its inputs and output live in this frame.
  auto list = [&dir, &listed] { listed.emplace(list_directory_blocking(dir)); };
  co_await runtime::offload(list);
  co_return std::move(*listed);
}

}  // namespace sluice::io
