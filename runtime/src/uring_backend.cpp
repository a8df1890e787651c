// The io_uring backend.
//
// - Set-up tries SINGLE_ISSUER|DEFER_TASKRUN (completions are processed only when this thread
//   enters the kernel, with no inter-processor interrupts), then COOP_TASKRUN, then no flags,
//   dropping a set whenever the kernel answers EINVAL. EPERM/ENOSYS mean io_uring is disabled:
//   the error names the cause and the fix.
// - In flight is capped at the CQ size, so the CQ cannot overflow; further ops wait in a FIFO
//   backlog. A full SQ is flushed to the kernel and retried; EBUSY/EAGAIN from the kernel mean "reap
//   first", so the ops stay queued and poll() reaps and retries.
// - poll() enters the kernel once: it submits the prepared SQEs and reaps (waiting for one when
//   asked). user_data carries the io_op*.
// - Under ThreadSanitizer, close is close(2), completed at the next poll: TSan tracks descriptors
//   through the libc calls it intercepts, and a close done by the kernel for the ring leaves the
//   number open in its eyes, so the number's next owner (an opendir on another thread) would race
//   with its previous one.

#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/log.hpp>

#include "sanitizers.hpp"

#include <liburing.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <system_error>

namespace sluice::runtime {

const char* to_string(op_code code) noexcept {
  switch (code) {
    case op_code::nop: return "nop";
    case op_code::read: return "read";
    case op_code::write: return "write";
    case op_code::fsync: return "fsync";
    case op_code::fdatasync: return "fdatasync";
    case op_code::openat: return "open";
    case op_code::close: return "close";
    case op_code::renameat: return "rename";
    case op_code::accept: return "accept";
    case op_code::connect: return "connect";
    case op_code::send: return "send";
    case op_code::recv: return "recv";
    case op_code::shutdown: return "shutdown";
    case op_code::timeout: return "timeout";
    case op_code::cancel: return "cancel";
    case op_code::mkdirat: return "mkdir";
    case op_code::unlinkat: return "unlink";
  }
  return "unknown";
}

namespace {

std::string read_sysctl(const char* path) {
  std::ifstream in(path);
  std::string value;
  if (in) std::getline(in, value);
  return value;
}

[[noreturn]] void throw_unavailable(int err) {
  throw std::system_error(err, std::generic_category(),
                          detail::describe_uring_setup_failure(err, read_sysctl("/proc/sys/kernel/io_uring_disabled")));
}

// An intrusive FIFO of operations (through io_op::next_).
class op_queue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  io_op* front() const noexcept { return head_; }
  void push(io_op& op) noexcept {
    op.next_ = nullptr;
    if (tail_) tail_->next_ = &op; else head_ = &op;
    tail_ = &op;
  }
  io_op* pop() noexcept {
    io_op* op = head_;
    head_ = op->next_;
    if (head_ == nullptr) tail_ = nullptr;
    return op;
  }
  // Takes `target` out if it is queued.
  bool remove(io_op* target) noexcept {
    io_op* prev = nullptr;
    for (io_op* op = head_; op != nullptr; prev = op, op = op->next_) {
      if (op != target) continue;
      if (prev) prev->next_ = op->next_; else head_ = op->next_;
      if (tail_ == op) tail_ = prev;
      return true;
    }
    return false;
  }

 private:
  io_op* head_ = nullptr;
  io_op* tail_ = nullptr;
};

class uring_backend final : public io_backend {
 public:
  explicit uring_backend(const uring_options& options) {
    unsigned flag_sets[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL,
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL,
        0,
    };
    int rc = -EINVAL;
    for (unsigned flags : flag_sets) {
      if (!options.prefer_defer_taskrun && (flags & IORING_SETUP_DEFER_TASKRUN)) continue;
      io_uring_params params{};
      params.flags = flags | IORING_SETUP_CQSIZE;
      params.cq_entries = options.cq_entries;
      rc = io_uring_queue_init_params(options.sq_entries, &ring_, &params);
      if (rc == 0) {
        flags_ = flags;
        cq_entries_ = params.cq_entries;
        cap_ = cq_entries_ > 2 * internal_reserve ? cq_entries_ - internal_reserve : cq_entries_ / 2;
        break;
      }
      if (rc != -EINVAL) break;
    }
    if (rc < 0) throw_unavailable(-rc);
    log::debug("io_uring ready: {} SQ / {} CQ entries, flags {:#x}", options.sq_entries, cq_entries_, flags_);
  }

  ~uring_backend() override { io_uring_queue_exit(&ring_); }

  void submit(io_op& op) override {
    ++outstanding_;
    if (op.code == op_code::cancel && cancel_in_backlog(op)) return;
#if defined(SLUICE_TSAN_ACTIVE)
    if (op.code == op_code::close) {
      op.result = ::close(op.fd) == 0 ? 0 : -errno;
      local_.push(op);
      return;
    }
#endif
    // Internal ops use the reserve and their own backlog, drained first: a cancel or the wake-up
    // read never waits behind ordinary ops.
    op_queue& backlog = op.internal ? internal_backlog_ : backlog_;
    if (backlog.empty() && in_flight_ < limit(op) && prepare(op)) return;
    backlog.push(op);
  }

  unsigned poll(bool wait) override {
    if (!local_.empty()) wait = false;
    int rc;
    if (wait) {
      rc = io_uring_submit_and_wait(&ring_, 1);
    } else {
      // Always enter the kernel with GETEVENTS: under DEFER_TASKRUN, and under COOP_TASKRUN without
      // TASKRUN_FLAG, completions are posted only then (a plain submit of an empty SQ never enters).
      rc = io_uring_submit_and_get_events(&ring_);
    }
    if (rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN && rc != -ETIME) {
      log::error("io_uring_enter failed: {}", std::strerror(-rc));
    }
    unsigned n = reap();
    n += dispatch_local();
    drain_backlog();
    return n;
  }

  std::size_t outstanding() const noexcept override { return outstanding_; }
  bool has_pending_work() const noexcept override {
    return io_uring_sq_ready(&ring_) > 0 || !internal_backlog_.empty() || !backlog_.empty() || !local_.empty() ||
           io_uring_cq_ready(&ring_) > 0;
  }
  std::size_t capacity() const noexcept override { return cap_; }
  const char* name() const noexcept override { return "io_uring"; }

 private:
  // Returns false when no SQE could be had even after flushing the SQ.
  bool prepare(io_op& op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      int rc = io_uring_submit(&ring_);
      if (rc < 0 && rc != -EBUSY && rc != -EAGAIN) log::error("io_uring_submit failed: {}", std::strerror(-rc));
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return false;
    }
    switch (op.code) {
      case op_code::nop: io_uring_prep_nop(sqe); break;
      case op_code::read: io_uring_prep_read(sqe, op.fd, op.buf, op.len, op.offset); break;
      case op_code::write: io_uring_prep_write(sqe, op.fd, op.buf, op.len, op.offset); break;
      case op_code::fsync: io_uring_prep_fsync(sqe, op.fd, 0); break;
      case op_code::fdatasync: io_uring_prep_fsync(sqe, op.fd, IORING_FSYNC_DATASYNC); break;
      case op_code::openat: io_uring_prep_openat(sqe, op.fd, op.path, static_cast<int>(op.flags), op.mode); break;
      case op_code::close: io_uring_prep_close(sqe, op.fd); break;
      case op_code::renameat: io_uring_prep_renameat(sqe, op.fd, op.path, op.fd2, op.path2, 0); break;
      case op_code::accept:
        io_uring_prep_accept(sqe, op.fd, static_cast<sockaddr*>(op.buf), reinterpret_cast<socklen_t*>(op.addr_len),
                             static_cast<int>(op.flags));
        break;
      case op_code::connect:
        io_uring_prep_connect(sqe, op.fd, static_cast<const sockaddr*>(op.buf), op.len);
        break;
      case op_code::send: io_uring_prep_send(sqe, op.fd, op.buf, op.len, static_cast<int>(op.flags)); break;
      case op_code::recv: io_uring_prep_recv(sqe, op.fd, op.buf, op.len, static_cast<int>(op.flags)); break;
      case op_code::shutdown: io_uring_prep_shutdown(sqe, op.fd, static_cast<int>(op.flags)); break;
      case op_code::timeout: {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(op.deadline.time_since_epoch()).count();
        if (ns < 0) ns = 0;
        auto* ts = reinterpret_cast<__kernel_timespec*>(op.timespec_);
        ts->tv_sec = ns / 1'000'000'000;
        ts->tv_nsec = ns % 1'000'000'000;
        io_uring_prep_timeout(sqe, ts, 0, IORING_TIMEOUT_ABS);
        break;
      }
      case op_code::cancel: io_uring_prep_cancel(sqe, op.target, 0); break;
      case op_code::mkdirat: io_uring_prep_mkdirat(sqe, op.fd, op.path, op.mode); break;
      case op_code::unlinkat: io_uring_prep_unlinkat(sqe, op.fd, op.path, static_cast<int>(op.flags)); break;
    }
    io_uring_sqe_set_data(sqe, &op);
    ++in_flight_;
    return true;
  }

  unsigned limit(const io_op& op) const noexcept { return op.internal ? cq_entries_ : cap_; }

  void drain_backlog() {
    for (op_queue* backlog : {&internal_backlog_, &backlog_}) {
      while (!backlog->empty() && in_flight_ < limit(*backlog->front()) && prepare(*backlog->front())) backlog->pop();
    }
  }

  // A cancel whose target still waits in the backlog never reaches the kernel: the target is taken
  // out and both complete at the next poll (the target with -ECANCELED).
  bool cancel_in_backlog(io_op& cancel) {
    if (!backlog_.remove(cancel.target) && !internal_backlog_.remove(cancel.target)) return false;
    cancel.target->result = -ECANCELED;
    cancel.result = 0;
    local_.push(*cancel.target);
    local_.push(cancel);
    return true;
  }

  unsigned dispatch_local() {
    unsigned n = 0;
    while (!local_.empty()) {
      io_op* op = local_.pop();
      --outstanding_;
      ++n;
      op->complete(*op);
    }
    return n;
  }

  unsigned reap() {
    unsigned head;
    unsigned n = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      auto* op = static_cast<io_op*>(io_uring_cqe_get_data(cqe));
      op->result = cqe->res;
      --in_flight_;
      --outstanding_;
      ++n;
      op->complete(*op);
    }
    io_uring_cq_advance(&ring_, n);
    return n;
  }

  io_uring ring_{};
  unsigned flags_ = 0;
  // CQ entries kept for internal ops: ordinary ops stop at cap_, internal ones at the CQ size.
  static constexpr unsigned internal_reserve = 8;
  unsigned cq_entries_ = 0;
  unsigned cap_ = 0;
  std::size_t in_flight_ = 0;
  std::size_t outstanding_ = 0;
  op_queue internal_backlog_;
  op_queue backlog_;
  op_queue local_;  // completed without the kernel (cancelled while still in a backlog; TSan's close)
};

}  // namespace

std::string detail::describe_uring_setup_failure(int err, const std::string& disabled) {
  std::string why;
  if (err == EPERM || err == ENOSYS) {
    why = fmt::format("io_uring is unavailable: io_uring_setup failed with {} ({}). ", err == EPERM ? "EPERM" : "ENOSYS",
                      std::strerror(err));
    if (!disabled.empty() && disabled != "0") {
      why += fmt::format(
          "The sysctl kernel.io_uring_disabled is {}. Fix: `sysctl -w kernel.io_uring_disabled=0` "
          "(or set it to 1 and add this user to the group in kernel.io_uring_group).",
          disabled);
    } else if (err == ENOSYS) {
      why += "The kernel lacks io_uring. Fix: run on Linux 6.1 or newer built with CONFIG_IO_URING=y.";
    } else {
      why += "A seccomp profile (e.g. a container runtime's default) probably blocks it. Fix: run with a "
             "profile that allows io_uring_setup, io_uring_enter and io_uring_register "
             "(docker: --security-opt seccomp=<profile allowing them>).";
    }
  } else if (err == ENOMEM) {
    why = "io_uring_setup failed with ENOMEM: the ring could not be allocated. Fix: raise RLIMIT_MEMLOCK "
          "(ulimit -l) or use smaller rings.";
  } else {
    why = fmt::format("io_uring_setup failed: {}", std::strerror(err));
  }
  return why;
}

std::unique_ptr<io_backend> make_uring_backend(const uring_options& options) {
  return std::make_unique<uring_backend>(options);
}

}  // namespace sluice::runtime
