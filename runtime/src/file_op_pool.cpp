// The epoll backend's blocking threads (see file_op_pool.hpp).

#include "file_op_pool.hpp"

#include "helper_thread.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace sluice::runtime::detail {

std::int32_t run_blocking_op(const io_op& op) noexcept {
  auto result = [](long rc) -> std::int32_t { return rc < 0 ? -errno : static_cast<std::int32_t>(rc); };
  const bool at_cursor = op.offset == static_cast<std::uint64_t>(-1);
  for (;;) {
    std::int32_t rc = -EINVAL;
    switch (op.code) {
      case op_code::read:
        rc = result(at_cursor ? ::read(op.fd, op.buf, op.len) : ::pread(op.fd, op.buf, op.len, static_cast<off_t>(op.offset)));
        break;
      case op_code::write:
        rc = result(at_cursor ? ::write(op.fd, op.buf, op.len)
                              : ::pwrite(op.fd, op.buf, op.len, static_cast<off_t>(op.offset)));
        break;
      case op_code::fsync: rc = result(::fsync(op.fd)); break;
      case op_code::fdatasync: rc = result(::fdatasync(op.fd)); break;
      case op_code::openat:
        rc = result(::openat(op.fd, op.path, static_cast<int>(op.flags), static_cast<mode_t>(op.mode)));
        break;
      case op_code::close: return result(::close(op.fd));  // never retried: the number may be reused
      case op_code::renameat: rc = result(::renameat(op.fd, op.path, op.fd2, op.path2)); break;
      case op_code::mkdirat: rc = result(::mkdirat(op.fd, op.path, static_cast<mode_t>(op.mode))); break;
      case op_code::unlinkat: rc = result(::unlinkat(op.fd, op.path, static_cast<int>(op.flags))); break;
      case op_code::statx:
        rc = result(::statx(op.fd, op.path != nullptr ? op.path : "", static_cast<int>(op.flags), op.mode,
                            static_cast<struct statx*>(op.buf)));
        break;
      default: return -EINVAL;
    }
    if (rc != -EINTR) return rc;
  }
}

file_op_pool::file_op_pool(unsigned max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "epoll backend: eventfd");
}

file_op_pool::~file_op_pool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
  ::close(event_fd_);
}

void file_op_pool::push(io_op& op) {
  std::lock_guard lock(mutex_);
  queue_.push_back(&op);
  if (idle_ > 0) {
    wake_.notify_one();
  } else if (threads_.size() < max_threads_) {
    threads_.emplace_back([this] { thread_main(); });
  }
}

bool file_op_pool::remove(const io_op& op) {
  std::lock_guard lock(mutex_);
  auto it = std::find(queue_.begin(), queue_.end(), &op);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

void file_op_pool::take_done(std::vector<io_op*>& out) {
  std::uint64_t count = 0;
  (void)!::read(event_fd_, &count, sizeof count);  // EAGAIN when a previous take already reset it
  std::lock_guard lock(mutex_);
  out.insert(out.end(), done_.begin(), done_.end());
  done_.clear();
}

void file_op_pool::thread_main() {
  block_all_signals();
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      ++idle_;
      wake_.wait(lock, [this] { return !queue_.empty() || stopping_; });
      --idle_;
      continue;
    }
    io_op* op = queue_.front();
    queue_.pop_front();
    lock.unlock();
    const std::int32_t rc = run_blocking_op(*op);
    lock.lock();
    op->result = rc;
    done_.push_back(op);
    const std::uint64_t one = 1;
    while (::write(event_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace sluice::runtime::detail
