// stdout_sink (see the header): buffered lines, written with io_uring writes at the current
// position (offset -1), looping over short writes.

#include <sluice/dataflow/stdout_sink.hpp>

#include <sluice/runtime/io_awaitable.hpp>

#include <string>

namespace sluice::dataflow {

namespace {

std::string subject(int fd) { return fd == 1 ? "stdout" : "descriptor " + std::to_string(fd); }

}  // namespace

stdout_sink::stdout_sink(int fd) : fd_(fd) { buffer_.reserve(buffer_bytes); }

runtime::task<io::result<void>> stdout_sink::write(std::string_view line) {
  buffer_.insert(buffer_.end(), line.begin(), line.end());
  buffer_.push_back('\n');
  ++lines_;
  if (buffer_.size() < buffer_bytes) co_return io::success();
  co_return co_await flush();
}

runtime::task<io::result<void>> stdout_sink::flush() {
  constexpr std::size_t max_op_bytes = 0x7ffff000;  // Linux's largest single write
  std::size_t done = 0;
  while (done < buffer_.size()) {
    runtime::io_op op;
    op.code = runtime::op_code::write;
    op.fd = fd_;
    op.buf = buffer_.data() + done;
    const std::size_t left = buffer_.size() - done;
    op.len = static_cast<std::uint32_t>(left < max_op_bytes ? left : max_op_bytes);
    op.offset = static_cast<std::uint64_t>(-1);  // at the current position: pipes, ttys, files
    const std::int32_t rc = co_await runtime::submit_op(op);
    if (rc < 0) {
      buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(done));
      co_return io::error::from_errno(-rc, "write to " + subject(fd_));
    }
    if (rc == 0) {
      buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(done));
      co_return io::error::from_code(io::errc::no_progress, "write to " + subject(fd_));
    }
    done += static_cast<std::size_t>(rc);
  }
  buffer_.clear();
  co_return io::success();
}

}  // namespace sluice::dataflow
