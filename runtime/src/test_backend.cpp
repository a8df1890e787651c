// The deterministic test backend (see test_backend.hpp).

#include <sluice/runtime/test_backend.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>

namespace sluice::runtime {

test_backend::test_backend() : now_(std::chrono::steady_clock::now()) {}

void test_backend::submit(io_op& op) {
  ++submitted_[static_cast<int>(op.code)];
  if (op.code == op_code::cancel) {
    auto it = std::find(pending_.begin(), pending_.end(), op.target);
    if (op.target != nullptr && admission_.remove(op.target)) {
      // Still in a backlog: it never reached the ring, as with io_uring.
      op.target->result = -ECANCELED;
      completed_.push_back(op.target);
      op.result = 0;
    } else if (it != pending_.end() && cancel_too_late_) {
      op.result = -EALREADY;
    } else if (it != pending_.end()) {
      pending_.erase(it);
      admission_.left(*op.target);
      op.target->result = -ECANCELED;
      completed_.push_back(op.target);
      op.result = 0;
      admit_backlog();
    } else {
      op.result = -ENOENT;
    }
    completed_.push_back(&op);
    return;
  }
  if (!admission_.may_enter(op)) {
    admission_.defer(op);
    return;
  }
  admission_.entered(op);
  pending_.push_back(&op);
}

void test_backend::set_capacity(std::size_t ordinary_ops, std::size_t internal_reserve) {
  assert(admission_.in_flight(op_class::prompt) + admission_.in_flight(op_class::wait) == 0 &&
         !admission_.backlogged() && "set_capacity with operations outstanding");
  admission_.set_limits(ordinary_ops, ordinary_ops + internal_reserve);
}

bool test_backend::backlogged(const io_op& op) const noexcept {
  bool found = false;
  admission_.for_each_backlogged([&](const io_op& queued) { found = found || &queued == &op; });
  return found;
}

void test_backend::admit_backlog() {
  while (io_op* op = admission_.next()) {
    admission_.take(*op);
    admission_.entered(*op);
    pending_.push_back(op);
  }
}

io_op* test_backend::find(op_code code, int fd) const noexcept {
  for (io_op* op : pending_) {
    if (op->code == code && (fd < 0 || op->fd == fd)) return op;
  }
  return nullptr;
}

void test_backend::take(io_op& op) {
  auto it = std::find(pending_.begin(), pending_.end(), &op);
  assert(it != pending_.end() && "completing an operation that is not pending");
  pending_.erase(it);
  admission_.left(op);
  admit_backlog();
}

void test_backend::complete(io_op& op, std::int32_t result) {
  take(op);
  op.result = result;
  completed_.push_back(&op);
}

void test_backend::perform(io_op& op, std::optional<std::uint32_t> max_bytes) {
  take(op);
  std::uint32_t len = op.len;
  if (max_bytes) len = std::min(len, *max_bytes);
  op.result = run_syscall(op, len);
  completed_.push_back(&op);
}

std::int32_t test_backend::run_syscall(io_op& op, std::uint32_t len) {
  ++performed_[static_cast<int>(op.code)];
  auto result = [](long rc) -> std::int32_t { return rc < 0 ? -errno : static_cast<std::int32_t>(rc); };
  const bool at_cursor = op.offset == static_cast<std::uint64_t>(-1);
  switch (op.code) {
    case op_code::nop: return 0;
    case op_code::read:
      return result(at_cursor ? ::read(op.fd, op.buf, len) : ::pread(op.fd, op.buf, len, static_cast<off_t>(op.offset)));
    case op_code::write:
      return result(at_cursor ? ::write(op.fd, op.buf, len) : ::pwrite(op.fd, op.buf, len, static_cast<off_t>(op.offset)));
    case op_code::fsync: return result(::fsync(op.fd));
    case op_code::fdatasync: return result(::fdatasync(op.fd));
    case op_code::openat:
      return result(::openat(op.fd, op.path, static_cast<int>(op.flags), static_cast<mode_t>(op.mode)));
    case op_code::close: return result(::close(op.fd));
    case op_code::renameat: return result(::renameat(op.fd, op.path, op.fd2, op.path2));
    case op_code::accept:
      return result(::accept4(op.fd, static_cast<sockaddr*>(op.buf), reinterpret_cast<socklen_t*>(op.addr_len),
                              static_cast<int>(op.flags)));
    case op_code::connect: return result(::connect(op.fd, static_cast<const sockaddr*>(op.buf), op.len));
    case op_code::send:
      return result(::send(op.fd, op.buf, len, static_cast<int>(op.flags) | MSG_DONTWAIT | MSG_NOSIGNAL));
    case op_code::recv: return result(::recv(op.fd, op.buf, len, static_cast<int>(op.flags) | MSG_DONTWAIT));
    case op_code::shutdown: return result(::shutdown(op.fd, static_cast<int>(op.flags)));
    case op_code::timeout: return -ETIME;
    case op_code::poll: {
      pollfd p{op.fd, static_cast<short>(op.flags), 0};
      const int rc = ::poll(&p, 1, 0);
      if (rc < 0) return -errno;
      if ((p.revents & POLLNVAL) != 0) return -EBADF;
      return p.revents;
    }
    case op_code::cancel: return -EINVAL;
    case op_code::mkdirat: return result(::mkdirat(op.fd, op.path, static_cast<mode_t>(op.mode)));
    case op_code::unlinkat: return result(::unlinkat(op.fd, op.path, static_cast<int>(op.flags)));
    case op_code::statx:
      return result(::statx(op.fd, op.path != nullptr ? op.path : "", static_cast<int>(op.flags), op.mode,
                            static_cast<struct statx*>(op.buf)));
  }
  return -EINVAL;
}

bool test_backend::is_ready(const io_op& op) const {
  short events = 0;
  switch (op.code) {
    case op_code::accept: events = POLLIN; break;
    case op_code::recv:
      if ((op.flags & MSG_DONTWAIT) != 0) return true;  // as io_uring: EAGAIN at once, never a wait
      events = POLLIN;
      break;
    case op_code::read: events = POLLIN; break;
    case op_code::send: events = POLLOUT; break;
    case op_code::poll: events = static_cast<short>(op.flags); break;
    case op_code::timeout: return false;
    default: return true;
  }
  pollfd p{op.fd, events, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool test_backend::auto_step(bool may_block) {
  for (;;) {
    // The oldest operation that can run now.
    for (io_op* op : pending_) {
      if (!is_ready(*op)) continue;
      for (auto& rule : faults_) {
        if (op->internal) break;
        if (auto injected = rule(*op)) {
          const bool data_op = op->code == op_code::read || op->code == op_code::write ||
                               op->code == op_code::send || op->code == op_code::recv;
          if (*injected >= 0 && data_op) {
            perform(*op, static_cast<std::uint32_t>(*injected));
          } else {
            complete(*op, *injected);
          }
          return true;
        }
      }
      perform(*op);
      return true;
    }
    if (!may_block) return false;
    // Nothing runnable: fire the earliest timer (virtual time), else wait for an fd to be ready.
    io_op* earliest = nullptr;
    for (io_op* op : pending_) {
      if (op->code == op_code::timeout && (!earliest || op->deadline < earliest->deadline)) earliest = op;
    }
    if (earliest != nullptr) {
      if (earliest->deadline > now_) now_ = earliest->deadline;
      complete(*earliest, -ETIME);
      return true;
    }
    std::vector<pollfd> fds;
    for (io_op* op : pending_) {
      short events = op->code == op_code::send ? POLLOUT : POLLIN;
      if (op->code == op_code::poll) events = static_cast<short>(op->flags);
      fds.push_back(pollfd{op->fd, events, 0});
    }
    if (fds.empty()) return false;
    int rc = ::poll(fds.data(), fds.size(), -1);
    if (rc < 0 && errno != EINTR) return false;
  }
}

unsigned test_backend::poll(bool wait) {
  if (completed_.empty()) {
    if (wait && on_idle) {
      on_idle(*this);
    } else if (auto_ || wait) {
      // Without an on_idle hook, a blocked executor falls back to performing operations, so a
      // test that switched auto mode off cannot hang the executor's own shutdown.
      auto_step(wait);
    }
  }
  unsigned n = 0;
  while (!completed_.empty()) {
    io_op* op = completed_.front();
    completed_.pop_front();
    ++n;
    op->complete(*op);
  }
  return n;
}

}  // namespace sluice::runtime
