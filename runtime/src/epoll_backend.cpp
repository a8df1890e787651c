// The epoll backend: the io_backend protocol (io_backend.hpp) where io_uring is unavailable.
//
// - Sockets (accept, connect, send, recv, and read/write of a socket) and reads of anything else
//   that can be polled (pipes, eventfds, signalfds, terminals) go by readiness: an op is tried at
//   once without blocking (MSG_DONTWAIT; a poll(2) of the descriptor first where the call has no
//   such flag), and on "would block" it waits in its descriptor's FIFO, one per direction. Each
//   descriptor is registered level-triggered with EPOLLONESHOT for what its waiting ops need and
//   re-armed after each event while some still wait, so a quiet descriptor costs nothing and a hung
//   up one does not spin. Descriptors keep their blocking mode: connect sets O_NONBLOCK only for
//   its own call (EINPROGRESS, then SO_ERROR once writable). Results are those io_uring reports:
//   >= 0 or -errno, short reads and writes included; an op whose MSG_DONTWAIT the caller set ends
//   at once, -EAGAIN included.
// - Everything else (file reads and writes, fsync, openat, close, rename, mkdir, unlink, statx,
//   writes to pipes and terminals) runs on the backend's few blocking threads (file_op_pool.hpp);
//   their completions come back through an eventfd this epoll watches. op.complete() always runs on
//   the executor's thread, inside poll().
// - Timeouts wait in a deadline heap (timer_heap.hpp); a blocking poll sleeps in epoll at most until
//   the earliest (epoll_pwait2's nanoseconds, or epoll_wait's milliseconds rounded up on kernels
//   without it) and expired ones complete with -ETIME.
// - Admission is io_uring's (admission.hpp) with the limits of a ring of `cq_entries`: the same
//   classes, caps, reserve and backlogs, so an executor full of idle connections still has room
//   for file I/O.
// - Cancel: a target still in a backlog, not yet started, waiting for readiness, queued for a
//   thread, or a timer completes with -ECANCELED and the cancel with 0; a target a thread runs
//   already ends with its real result and the cancel gets -EALREADY; one that has completed,
//   -ENOENT. The target completes before its cancel, each exactly once.
// - Close takes the descriptor out of epoll before a thread closes it. Ops still waiting on it are
//   tried once more (a shutdown may have ended them) and otherwise complete with -ECANCELED, as do
//   ops on it still in the admission backlog (they would start after the close otherwise). A
//   descriptor closed with close(2) directly (io/ does, after cancelling its waits) leaves epoll by
//   itself; its number's next owner is registered afresh (a MOD that fails with ENOENT becomes an
//   ADD), since a cancel leaves its descriptor's registration marked as not armed.
// - A poll op (op_code::poll) waits like a socket op, in `in` when it asks for input only and in
//   `out` otherwise (the registration then asks for input too); its result is poll(2)'s revents.
//   It shares the descriptor's one registration with the fd's other ops.
// - MSG_WAITALL is not emulated: a recv returns what has arrived, as a short read.

#include <sluice/runtime/admission.hpp>
#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/log.hpp>

#include "file_op_pool.hpp"
#include "timer_heap.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace sluice::runtime {

namespace {

// What an op is doing, in io_op::backend_state_.
enum class op_state : std::uint8_t {
  idle,
  backlog,       // in the admission backlog
  queued,        // admitted, to be started at the next poll
  wait_socket,   // waiting for readiness; tried with MSG_DONTWAIT
  wait_guarded,  // waiting for readiness; tried after a poll(2) says it will not block
  wait_connect,  // a connect in progress: SO_ERROR once writable
  pool,          // with the blocking threads
  timer,
  done,           // completed, not yet dispatched, never admitted
  done_admitted,  // completed, not yet dispatched, holds an admission place
  finished,
};

op_state state_of(const io_op& op) noexcept { return static_cast<op_state>(op.backend_state_); }
void set_state(io_op& op, op_state s) noexcept { op.backend_state_ = static_cast<std::uint8_t>(s); }

std::int32_t syscall_result(long rc) noexcept { return rc < 0 ? -errno : static_cast<std::int32_t>(rc); }

// Whether `code` works on its fd itself (not on a directory its path is relative to).
bool uses_fd_itself(op_code code) noexcept {
  switch (code) {
    case op_code::read:
    case op_code::write:
    case op_code::fsync:
    case op_code::fdatasync:
    case op_code::accept:
    case op_code::connect:
    case op_code::send:
    case op_code::recv:
    case op_code::poll:
    case op_code::shutdown: return true;
    default: return false;
  }
}

bool reads(const io_op& op) noexcept {
  return op.code == op_code::accept || op.code == op_code::recv || op.code == op_code::read ||
         (op.code == op_code::poll && (op.flags & POLLOUT) == 0);
}

// A poll op's events right now: its revents, nullopt when none, or -EBADF.
std::optional<std::int32_t> poll_events_now(const io_op& op) noexcept {
  pollfd p{op.fd, static_cast<short>(op.flags), 0};
  const int rc = ::poll(&p, 1, 0);
  if (rc < 0) return -errno;
  if (rc == 0) return std::nullopt;
  if ((p.revents & POLLNVAL) != 0) return -EBADF;
  return p.revents;
}

// A nonblocking poll of one descriptor: ready, not ready (nullopt), or -EBADF.
std::optional<std::int32_t> poll_now(int fd, short events) noexcept {
  pollfd p{fd, events, 0};
  const int rc = ::poll(&p, 1, 0);
  if (rc < 0) return -errno;
  if (rc == 0) return std::nullopt;
  if ((p.revents & POLLNVAL) != 0) return -EBADF;
  return 0;
}

constexpr std::uint64_t pool_tag = ~std::uint64_t{0};
constexpr unsigned pool_threads = 2;

class epoll_backend final : public io_backend {
 public:
  explicit epoll_backend(const uring_options& options) {
    // The threads' eventfd now, the threads on first use: a descriptor count taken before the first
    // file op stays true after it.
    pool_ = std::make_unique<detail::file_op_pool>(pool_threads);
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) throw std::system_error(errno, std::generic_category(), "epoll backend: epoll_create1");
    // The limits of an io_uring with these CQ entries (the kernel rounds up to a power of two).
    unsigned cq = 1;
    while (cq < options.cq_entries) cq *= 2;
    const unsigned reserve = 8;
    const unsigned cap = cq > 2 * reserve ? cq - reserve : (cq / 2 > 0 ? cq / 2 : 1);
    admission_.set_limits(cap, cq < cap ? cap : cq);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = pool_tag;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, pool_->event_fd(), &ev) != 0) {
      const int err = errno;
      ::close(epfd_);
      throw std::system_error(err, std::generic_category(), "epoll backend: watching the file threads");
    }
    log::debug("epoll backend ready: {} ordinary ops in flight, {} of them waits", admission_.capacity(),
               admission_.wait_capacity());
  }

  ~epoll_backend() override {
    pool_.reset();  // joins the threads (nothing is outstanding when an executor ends)
    ::close(epfd_);
  }

  void submit(io_op& op) override {
    ++outstanding_;
    ++counters_.submitted;
    if (op.code == op_code::timeout) {
      set_state(op, op_state::timer);
      timers_.push(op);
      return;
    }
    if (op.code == op_code::cancel) {
      cancel(op);
      return;
    }
    if (admission_.may_enter(op)) {
      admit(op);
    } else {
      set_state(op, op_state::backlog);
      admission_.defer(op);
    }
  }

  unsigned poll(bool wait) override {
    start_queued();
    wait_for_events(wait && local_.empty());
    unsigned n = dispatch_local();
    n += expire_timers();
    drain_backlog();
    start_queued();
    return n;
  }

  std::size_t outstanding() const noexcept override { return outstanding_; }
  backend_counters counters() const noexcept override { return counters_; }
  bool has_pending_work() const noexcept override {
    return !start_.empty() || !local_.empty() || admission_.backlogged();
  }
  std::size_t capacity() const noexcept override { return admission_.capacity(); }
  const char* name() const noexcept override { return "epoll"; }

 private:
  struct fd_watch {
    detail::op_queue in, out;  // accept/recv/read; connect/send/write
    bool registered = false;   // added to epoll (possibly disarmed)
    bool armed = false;        // registered for `armed_events`, not fired since
    std::uint32_t armed_events = 0;
  };

  void admit(io_op& op) {
    admission_.entered(op);
    set_state(op, op_state::queued);
    start_.push(op);
  }

  void drain_backlog() {
    while (io_op* op = admission_.next()) {
      admission_.take(*op);
      admit(*op);
    }
  }

  void finish(io_op& op, std::int32_t result) {
    op.result = result;
    set_state(op, op_state::done_admitted);
    local_.push(op);
  }

  void start_queued() {
    while (!start_.empty()) start(*start_.pop());
  }

  void start(io_op& op) {
    switch (op.code) {
      case op_code::nop: finish(op, 0); return;
      case op_code::shutdown: finish(op, syscall_result(::shutdown(op.fd, static_cast<int>(op.flags)))); return;
      case op_code::accept:
      case op_code::send:
      case op_code::recv: try_or_wait(op, op_state::wait_socket); return;
      case op_code::connect: start_connect(op); return;
      case op_code::poll: try_or_wait(op, op_state::wait_socket); return;
      case op_code::read:
      case op_code::write: {
        struct stat st {};
        if (::fstat(op.fd, &st) != 0) {
          finish(op, -errno);
        } else if (S_ISSOCK(st.st_mode)) {
          try_or_wait(op, op_state::wait_socket);
        } else if (op.code == op_code::read && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode) && !S_ISDIR(st.st_mode)) {
          try_or_wait(op, op_state::wait_guarded);
        } else {
          to_pool(op);  // files; writes to pipes and terminals (a blocking write may take a while)
        }
        return;
      }
      case op_code::close: close_fd(op); return;
      default: to_pool(op); return;
    }
  }

  void try_or_wait(io_op& op, op_state how) {
    set_state(op, how);
    if (auto rc = attempt(op)) {
      finish(op, *rc);
      return;
    }
    fd_watch& w = watches_[op.fd];
    (reads(op) ? w.in : w.out).push(op);
    arm(op.fd, w);
  }

  // The op's call without blocking: its result, or nullopt when it would block.
  std::optional<std::int32_t> attempt(io_op& op) {
    const bool dontwait = (op.flags & MSG_DONTWAIT) != 0 && (op.code == op_code::send || op.code == op_code::recv);
    for (;;) {
      std::int32_t rc = -EINVAL;
      switch (state_of(op)) {
        case op_state::wait_connect: {
          auto ready = poll_now(op.fd, POLLOUT);
          if (!ready || *ready < 0) return ready;
          int err = 0;
          socklen_t len = sizeof err;
          if (::getsockopt(op.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return -errno;
          return -err;
        }
        case op_state::wait_guarded: {
          auto ready = poll_now(op.fd, reads(op) ? POLLIN : POLLOUT);
          if (!ready || *ready < 0) return ready;
          rc = detail::run_blocking_op(op);  // will not block now
          break;
        }
        default:
          switch (op.code) {
            case op_code::accept: {
              auto ready = poll_now(op.fd, POLLIN);
              if (!ready || *ready < 0) return ready;
              rc = syscall_result(::accept4(op.fd, static_cast<sockaddr*>(op.buf), reinterpret_cast<socklen_t*>(op.addr_len),
                                            static_cast<int>(op.flags)));
              break;
            }
            case op_code::connect: return start_connect_call(op);
            case op_code::poll: return poll_events_now(op);
            case op_code::send:
            case op_code::write:
              rc = syscall_result(::send(op.fd, op.buf, op.len, static_cast<int>(op.flags) | MSG_DONTWAIT));
              break;
            case op_code::recv:
            case op_code::read:
              rc = syscall_result(::recv(op.fd, op.buf, op.len, static_cast<int>(op.flags) | MSG_DONTWAIT));
              break;
            default: return -EINVAL;
          }
      }
      if (rc == -EINTR) continue;
      if ((rc == -EAGAIN || rc == -EWOULDBLOCK) && !dontwait) return std::nullopt;
      return rc;
    }
  }

  void start_connect(io_op& op) {
    set_state(op, op_state::wait_socket);
    if (auto rc = start_connect_call(op)) {
      finish(op, *rc);
      return;
    }
    fd_watch& w = watches_[op.fd];
    w.out.push(op);
    arm(op.fd, w);
  }

  // A nonblocking connect(2): done (its result), or nullopt with the op's state saying what to
  // wait for (in progress: SO_ERROR when writable; EAGAIN, a full unix listener: try again).
  std::optional<std::int32_t> start_connect_call(io_op& op) {
    const int flags = ::fcntl(op.fd, F_GETFL);
    if (flags < 0) return -errno;
    if ((flags & O_NONBLOCK) == 0) (void)::fcntl(op.fd, F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(op.fd, static_cast<const sockaddr*>(op.buf), op.len);
    const int err = rc < 0 ? errno : 0;
    if ((flags & O_NONBLOCK) == 0) (void)::fcntl(op.fd, F_SETFL, flags);
    if (rc == 0) return 0;
    if (err == EINPROGRESS || err == EINTR) {
      set_state(op, op_state::wait_connect);
      return std::nullopt;
    }
    if (err == EAGAIN) return std::nullopt;
    return -err;
  }

  // Registers `fd` for what its waiting ops need (one shot), unless it already is.
  void arm(int fd, fd_watch& w) {
    std::uint32_t want = 0;
    if (!w.in.empty()) want |= EPOLLIN;
    if (!w.out.empty()) want |= EPOLLOUT;
    // A poll op for both directions waits in `out` (reads() is false for it): ask for input too.
    w.out.for_each([&](const io_op& op) {
      if (op.code == op_code::poll && (op.flags & POLLIN) != 0) want |= EPOLLIN;
    });
    if (want == 0 || (w.armed && w.armed_events == want)) return;
    epoll_event ev{};
    ev.events = want | EPOLLONESHOT;
    ev.data.u64 = static_cast<std::uint64_t>(fd);
    int rc;
    if (w.registered) {
      rc = ::epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
      if (rc < 0 && errno == ENOENT) rc = ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);  // closed and reused
    } else {
      rc = ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
      if (rc < 0 && errno == EEXIST) rc = ::epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
    }
    if (rc == 0) {
      w.registered = w.armed = true;
      w.armed_events = want;
      return;
    }
    // Not pollable (EPERM: a regular file, some devices) or gone: reads go to a thread, the rest fail.
    const int err = errno;
    for (detail::op_queue* q : {&w.in, &w.out}) {
      while (!q->empty()) {
        io_op& op = *q->pop();
        if (err == EPERM && (op.code == op_code::read || op.code == op_code::write)) {
          to_pool(op);
        } else {
          finish(op, -err);
        }
      }
    }
    w.armed = false;
  }

  void on_ready(int fd) {
    auto it = watches_.find(fd);
    if (it == watches_.end()) return;
    fd_watch& w = it->second;
    w.armed = false;  // one shot
    for (detail::op_queue* q : {&w.in, &w.out}) {
      while (!q->empty()) {
        auto rc = attempt(*q->front());
        if (!rc) break;
        finish(*q->pop(), *rc);
      }
    }
    arm(fd, w);
  }

  void close_fd(io_op& op) {
    if (auto it = watches_.find(op.fd); it != watches_.end()) {
      fd_watch& w = it->second;
      for (detail::op_queue* q : {&w.in, &w.out}) {
        while (!q->empty()) {
          io_op& waiting = *q->pop();
          auto rc = attempt(waiting);  // a shutdown just before the close may have ended it
          finish(waiting, rc ? *rc : -ECANCELED);
        }
      }
      if (w.registered) (void)::epoll_ctl(epfd_, EPOLL_CTL_DEL, op.fd, nullptr);
      watches_.erase(it);
    }
    // Ops on it still in the admission backlog would otherwise start after the close, against a
    // closed descriptor or the next owner of its number.
    backlogged_on_.clear();
    admission_.for_each_backlogged([&](io_op& queued) {
      if (queued.fd == op.fd && uses_fd_itself(queued.code)) backlogged_on_.push_back(&queued);
    });
    for (io_op* queued : backlogged_on_) {
      if (!admission_.remove(queued)) continue;
      queued->result = -ECANCELED;
      set_state(*queued, op_state::done);
      local_.push(*queued);
    }
    to_pool(op);
  }

  void to_pool(io_op& op) {
    set_state(op, op_state::pool);
    pool_->push(op);
  }

  void take_pool_done() {
    detail::op_queue done = pool_->take_done();
    while (!done.empty()) {
      io_op* op = done.pop();  // (before finish, which may link it elsewhere)
      finish(*op, op->result);
    }
  }

  void cancel(io_op& c) {
    io_op* t = c.target;
    std::int32_t rc = -ENOENT;
    if (t != nullptr) {
      switch (state_of(*t)) {
        case op_state::timer:
          if (timers_.contains(t)) {
            timers_.remove(*t);
            t->result = -ECANCELED;
            set_state(*t, op_state::done);
            local_.push(*t);
            rc = 0;
          }
          break;
        case op_state::backlog:
          if (admission_.remove(t)) {
            t->result = -ECANCELED;
            set_state(*t, op_state::done);
            local_.push(*t);
            rc = 0;
          }
          break;
        case op_state::queued:
          if (start_.remove(t)) {
            finish(*t, -ECANCELED);
            rc = 0;
          }
          break;
        case op_state::wait_socket:
        case op_state::wait_guarded:
        case op_state::wait_connect:
          if (auto it = watches_.find(t->fd); it != watches_.end() && (it->second.in.remove(t) || it->second.out.remove(t))) {
            // The next wait re-arms (MOD, or ADD if the descriptor was closed without the backend and
            // its number reused: epoll forgot the old registration then).
            it->second.armed = false;
            finish(*t, -ECANCELED);
            rc = 0;
          }
          break;
        case op_state::pool:
          if (pool_->remove(*t)) {
            finish(*t, -ECANCELED);
            rc = 0;
          } else {
            rc = -EALREADY;  // a thread runs it: it ends with its real result
          }
          break;
        default: break;
      }
    }
    c.result = rc;
    set_state(c, op_state::done);
    local_.push(c);
  }

  void wait_for_events(bool block) {
    int timeout_ms = 0;
    timespec until{};
    const timespec* until_ptr = &until;
    if (block) {
      if (timers_.empty()) {
        timeout_ms = -1;
        until_ptr = nullptr;
      } else {
        const auto left = timers_.earliest().deadline - std::chrono::steady_clock::now();
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count() + 1;  // not early
        if (ns > 1) {
          until.tv_sec = ns / 1'000'000'000;
          until.tv_nsec = ns % 1'000'000'000;
          timeout_ms = static_cast<int>(std::min<long long>((ns + 999'999) / 1'000'000, 1 << 30));
        }
      }
    }
    epoll_event events[64];
    int n = -1;
    const auto idle_from = block ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    if (have_pwait2_) {
      n = ::epoll_pwait2(epfd_, events, 64, until_ptr, nullptr);
      if (n < 0 && errno == ENOSYS) have_pwait2_ = false;
    }
    if (!have_pwait2_) n = ::epoll_wait(epfd_, events, 64, timeout_ms);
    if (block) {
      ++counters_.waits;
      counters_.waited += std::chrono::steady_clock::now() - idle_from;
    }
    if (n < 0) {
      if (errno != EINTR) log::error("epoll_wait failed: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == pool_tag) {
        take_pool_done();
      } else {
        on_ready(static_cast<int>(events[i].data.u64));
      }
    }
  }

  unsigned dispatch_local() {
    unsigned n = 0;
    while (!local_.empty()) {
      io_op* op = local_.pop();
      if (state_of(*op) == op_state::done_admitted) admission_.left(*op);  // before complete(): it may reuse the op
      set_state(*op, op_state::finished);
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
    for (std::size_t left = timers_.size(); left > 0 && !timers_.empty() && timers_.earliest().deadline <= now; --left) {
      io_op& op = timers_.pop();
      op.result = -ETIME;
      set_state(op, op_state::finished);
      --outstanding_;
      ++n;
      op.complete(op);
    }
    return n;
  }

  int epfd_ = -1;
  bool have_pwait2_ = true;
  ring_admission admission_{1, 1};
  std::size_t outstanding_ = 0;
  backend_counters counters_{};
  detail::timer_heap timers_;
  detail::op_queue start_;  // admitted, to be started
  detail::op_queue local_;  // completed, to be dispatched
  std::unordered_map<int, fd_watch> watches_;
  std::unique_ptr<detail::file_op_pool> pool_;
  std::vector<io_op*> backlogged_on_;  // close_fd's scratch
};

}  // namespace

std::unique_ptr<io_backend> make_epoll_backend(const uring_options& options) {
  return std::make_unique<epoll_backend>(options);
}

}  // namespace sluice::runtime
