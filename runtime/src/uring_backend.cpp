// The io_uring backend.
//
// - Set-up tries SINGLE_ISSUER|DEFER_TASKRUN (completions are processed only when this thread
//   enters the kernel, with no inter-processor interrupts), then COOP_TASKRUN, then no flags,
//   dropping a set whenever the kernel answers EINVAL. EPERM/ENOSYS mean io_uring is disabled:
//   the error names the cause and the fix.
// - Admission (admission.hpp): ordinary ops are capped below the CQ size, so the CQ cannot
//   overflow, and waits (recv, accept, connect, timeout) at an eighth less than that, so file I/O,
//   fsyncs and sends always find room; further ops wait in their class's FIFO backlog. A full SQ is
//   flushed to the kernel and retried; EBUSY/EAGAIN from the kernel mean "reap first", so the ops
//   stay queued and poll() reaps and retries.
// - Timeouts never enter the ring: they wait in a deadline heap (timer_heap.hpp), a blocking poll
//   waits for completions at most until the earliest deadline (the relative timeout of
//   io_uring_enter's EXT_ARG), and every poll completes the expired ones with -ETIME. So an
//   executor's timers cost no CQ entry, however many there are, and never wait for ring room.
// - poll() enters the kernel once: it submits the prepared SQEs and reaps (waiting for one when
//   asked). user_data carries the io_op*.
// - Under ThreadSanitizer, close is close(2), completed at the next poll: TSan tracks descriptors
//   through the libc calls it intercepts, and a close done by the kernel for the ring leaves the
//   number open in its eyes, so the number's next owner (an opendir on another thread) would race
//   with its previous one.

#include <sluice/runtime/admission.hpp>
#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/log.hpp>

#include "sanitizers.hpp"
#include "timer_heap.hpp"

#include <liburing.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
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
    case op_code::statx: return "stat";
    case op_code::poll: return "poll";
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

// A std::system_error whose what() is the description alone: that already names the errno and its
// text, which std::system_error would append a second time.
class uring_unavailable final : public std::system_error {
 public:
  uring_unavailable(int err, std::string message)
      : std::system_error(err, std::generic_category()), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

[[noreturn]] void throw_unavailable(int err) {
  throw uring_unavailable(err, detail::describe_uring_setup_failure(err, read_sysctl("/proc/sys/kernel/io_uring_disabled")));
}

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
        const unsigned cap = cq_entries_ > 2 * internal_reserve ? cq_entries_ - internal_reserve : cq_entries_ / 2;
        admission_.set_limits(cap, cq_entries_);
        break;
      }
      if (rc != -EINVAL) break;
    }
    if (rc < 0) throw_unavailable(-rc);
    log::debug("io_uring ready: {} SQ / {} CQ entries ({} ordinary ops in flight, {} of them waits), flags {:#x}",
               options.sq_entries, cq_entries_, admission_.capacity(), admission_.wait_capacity(), flags_);
  }

  ~uring_backend() override { io_uring_queue_exit(&ring_); }

  void submit(io_op& op) override {
    ++outstanding_;
    ++counters_.submitted;
    if (op.code == op_code::timeout) {
      timers_.push(op);
      return;
    }
    if (op.code == op_code::cancel && cancel_in_backlog(op)) return;
#if defined(SLUICE_TSAN_ACTIVE)
    if (op.code == op_code::close) {
      op.result = ::close(op.fd) == 0 ? 0 : -errno;
      local_.push(op);
      return;
    }
#endif
    // Each class has its own backlog: a cancel or the wake-up read never waits behind ordinary ops,
    // a write never behind recvs.
    if (admission_.may_enter(op) && prepare(op)) return;
    admission_.defer(op);
  }

  unsigned poll(bool wait) override {
    if (!local_.empty()) wait = false;
    __kernel_timespec until_timer{};
    if (wait && !timers_.empty()) {
      const auto left = timers_.earliest().deadline - std::chrono::steady_clock::now();
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count() + 1;  // not early
      if (ns <= 1) wait = false;  // one is due already
      until_timer.tv_sec = ns / 1'000'000'000;
      until_timer.tv_nsec = ns % 1'000'000'000;
    }
    int rc;
    if (wait) {
      const auto idle_from = std::chrono::steady_clock::now();
      if (!timers_.empty()) {
        io_uring_cqe* cqe = nullptr;
        rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &until_timer, nullptr);
      } else {
        rc = io_uring_submit_and_wait(&ring_, 1);
      }
      ++counters_.waits;
      counters_.waited += std::chrono::steady_clock::now() - idle_from;
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
    n += expire_timers();
    drain_backlog();
    return n;
  }

  std::size_t outstanding() const noexcept override { return outstanding_; }
  backend_counters counters() const noexcept override { return counters_; }
  bool has_pending_work() const noexcept override {
    // An expired timer is not counted here (that needs the clock): it is outstanding, so the
    // executor polls, and a blocking poll does not wait past its deadline.
    return io_uring_sq_ready(&ring_) > 0 || admission_.backlogged() || !local_.empty() || io_uring_cq_ready(&ring_) > 0;
  }
  std::size_t capacity() const noexcept override { return admission_.capacity(); }
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
      case op_code::timeout: io_uring_prep_nop(sqe); break;  // never here: timers wait in timers_
      case op_code::cancel: io_uring_prep_cancel(sqe, op.target, 0); break;
      case op_code::mkdirat: io_uring_prep_mkdirat(sqe, op.fd, op.path, op.mode); break;
      case op_code::unlinkat: io_uring_prep_unlinkat(sqe, op.fd, op.path, static_cast<int>(op.flags)); break;
      case op_code::poll: io_uring_prep_poll_add(sqe, op.fd, op.flags); break;
      case op_code::statx:
        io_uring_prep_statx(sqe, op.fd, op.path, static_cast<int>(op.flags), op.mode, static_cast<struct statx*>(op.buf));
        break;
    }
    io_uring_sqe_set_data(sqe, &op);
    admission_.entered(op);
    return true;
  }

  void drain_backlog() {
    while (io_op* op = admission_.next()) {
      if (!prepare(*op)) return;  // no SQE even after a flush: the next poll retries
      admission_.take(*op);
    }
  }

  // A cancel whose target still waits in a backlog or in the timer heap never reaches the kernel:
  // the target is taken out and both complete at the next poll (the target with -ECANCELED).
  bool cancel_in_backlog(io_op& cancel) {
    if (timers_.contains(cancel.target)) {
      timers_.remove(*cancel.target);
    } else if (!admission_.remove(cancel.target)) {
      return false;
    }
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

  // Completes every timer whose deadline has passed (-ETIME), earliest first.
  unsigned expire_timers() {
    if (timers_.empty()) return 0;
    const auto now = std::chrono::steady_clock::now();
    unsigned n = 0;
    // Bounded by the timers pending now: a completion only schedules its waiter (no new timer).
    for (std::size_t left = timers_.size(); left > 0 && timers_.earliest().deadline <= now; --left) {
      io_op& op = timers_.pop();
      op.result = -ETIME;
      --outstanding_;
      ++n;
      op.complete(op);
    }
    return n;
  }

  unsigned reap() {
    unsigned head;
    unsigned seen = 0;
    unsigned n = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      // A kernel without EXT_ARG: liburing's own timeout for a timed wait.
      if (cqe->user_data == LIBURING_UDATA_TIMEOUT) continue;
      auto* op = static_cast<io_op*>(io_uring_cqe_get_data(cqe));
      op->result = cqe->res;
      admission_.left(*op);  // before complete(): it may reuse the op
      --outstanding_;
      ++n;
      op->complete(*op);
    }
    io_uring_cq_advance(&ring_, seen);
    return n;
  }

  io_uring ring_{};
  unsigned flags_ = 0;
  // CQ entries kept for internal ops: ordinary ops stop at the cap, internal ones at the CQ size.
  static constexpr unsigned internal_reserve = 8;
  unsigned cq_entries_ = 0;
  ring_admission admission_{1, 1};
  std::size_t outstanding_ = 0;
  backend_counters counters_{};
  detail::timer_heap timers_;
  detail::op_queue local_;  // completed without the kernel (cancelled while still in a backlog; TSan's close)
};

}  // namespace

namespace {

// Whether `release` ("6.18.4-1-amd64") is at least major.minor; false when it does not parse.
bool release_at_least(const std::string& release, int major, int minor) {
  int got_major = 0, got_minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &got_major, &got_minor) != 2) return false;
  return got_major > major || (got_major == major && got_minor >= minor);
}

std::string this_kernel_release() {
  utsname u{};
  return ::uname(&u) == 0 ? std::string(u.release) : std::string();
}

constexpr std::string_view seccomp_fix =
    "Fix: run with a profile that allows io_uring_setup, io_uring_enter and io_uring_register "
    "(docker: --security-opt seccomp=<profile allowing them>).";

// ENOSYS: which of "no io_uring here" and "a filter says so" it is.
std::string describe_enosys(const std::string& disabled, const std::string& release) {
  if (!disabled.empty()) {
    // The sysctl exists only where io_uring is built in: the ENOSYS came from a filter.
    return fmt::format("The kernel has io_uring (kernel.io_uring_disabled is {}), so a seccomp filter or a container "
                       "profile denies it, answering ENOSYS. {}",
                       disabled, seccomp_fix);
  }
  if (release_at_least(release, 5, 1)) {
    return fmt::format("Linux {} has io_uring_setup (since 5.1), so a seccomp filter or a container profile probably "
                       "denies it, answering ENOSYS; or this kernel was built without CONFIG_IO_URING. {} Or use a "
                       "kernel built with CONFIG_IO_URING=y.",
                       release, seccomp_fix);
  }
  return fmt::format("The kernel{} lacks io_uring. Fix: run on Linux 6.1 or newer built with CONFIG_IO_URING=y.",
                     release.empty() ? std::string() : " (Linux " + release + ")");
}

}  // namespace

std::string detail::describe_uring_setup_failure(int err, const std::string& disabled) {
  return describe_uring_setup_failure(err, disabled, this_kernel_release());
}

std::string detail::describe_uring_setup_failure(int err, const std::string& disabled, const std::string& release) {
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
      why += describe_enosys(disabled, release);
    } else {
      why += fmt::format("A seccomp profile (e.g. a container runtime's default) probably blocks it. {}", seccomp_fix);
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
