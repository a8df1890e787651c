// The epoll backend's blocking threads (see file_op_pool.hpp).

#include "file_op_pool.hpp"

#include "helper_thread.hpp"

#include <sluice/runtime/log.hpp>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

namespace sluice::runtime::detail {

namespace {
// As glibc's default: address space, committed as used. Not less: the thread's static TLS lives at
// its top too, and ThreadSanitizer's alone is hundreds of KiB.
constexpr std::size_t stack_bytes = std::size_t{8} << 20;
constexpr std::size_t guard_bytes = 4096;
}  // namespace

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
  threads_.reserve(max_threads_);
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "epoll backend: eventfd");
}

file_op_pool::~file_op_pool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) {
    pthread_join(t.id, nullptr);
    ::munmap(t.stack, stack_bytes);
  }
  ::close(event_fd_);
}

void file_op_pool::push(io_op& op) {
  std::lock_guard lock(mutex_);
  if (idle_ == 0 && threads_.size() < max_threads_ && !start_thread() && threads_.empty()) {
    // No thread at all: run it here, blocking the executor, rather than never.
    op.result = run_blocking_op(op);
    done_.push(op);
    const std::uint64_t one = 1;
    while (::write(event_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
    return;
  }
  queue_.push(op);
  if (idle_ > 0) wake_.notify_one();
}

bool file_op_pool::start_thread() {
  worker w;
  w.stack = ::mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (w.stack == MAP_FAILED) {
    note_start_failure("no stack for another file thread", errno);
    return false;
  }
  (void)::mprotect(w.stack, guard_bytes, PROT_NONE);  // stacks grow down: a guard page below
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, w.stack, stack_bytes);
  const int rc = pthread_create(&w.id, &attr, &file_op_pool::thread_entry, this);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    ::munmap(w.stack, stack_bytes);
    note_start_failure("cannot start another file thread", rc);
    return false;
  }
  threads_.push_back(w);  // (reserved: never allocates)
  return true;
}

// Once per pool: a pool short of memory meets it on every op it queues while its threads are busy.
void file_op_pool::note_start_failure(const char* what, int error) {
  if (start_failure_noted_) return;
  start_failure_noted_ = true;
  log::error("epoll backend: {}: {}; going on with {} (of at most {}){}", what, std::strerror(error), threads_.size(),
             max_threads_, threads_.empty() ? ", running file operations on the executor, blocking it" : "");
}

void* file_op_pool::thread_entry(void* self) {
  static_cast<file_op_pool*>(self)->thread_main();
  return nullptr;
}

bool file_op_pool::remove(const io_op& op) {
  std::lock_guard lock(mutex_);
  return queue_.remove(&op);
}

op_queue file_op_pool::take_done() {
  std::uint64_t count = 0;
  (void)!::read(event_fd_, &count, sizeof count);  // EAGAIN when a previous take already reset it
  std::lock_guard lock(mutex_);
  return std::exchange(done_, op_queue{});
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
    io_op* op = queue_.pop();
    lock.unlock();
    const std::int32_t rc = run_blocking_op(*op);
    lock.lock();
    op->result = rc;
    done_.push(*op);
    const std::uint64_t one = 1;
    while (::write(event_fd_, &one, sizeof one) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace sluice::runtime::detail
