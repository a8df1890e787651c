#pragma once
// The I/O backend seam: an executor submits operations through an io_backend and receives their
// completions from it. Production uses io_uring (make_uring_backend), or epoll where io_uring is
// unavailable (make_epoll_backend; make_backend chooses, see below); tests use test_backend, which
// lets a test decide completion order and inject results.
//
// Protocol:
// - `submit(op)` accepts an operation; the backend owns it until it calls `op.complete(op)`, on the
//   executor's thread, from within `poll`. The memory behind the op must stay valid until then.
// - `poll(wait)` submits what was accepted (one kernel entry per call) and dispatches completions;
//   with `wait`, it blocks until at least one completion arrives.
// - A cancel op (`op_code::cancel`, `target` set) asks the backend to cancel `target`. The target
//   still completes on its own (with -ECANCELED, or its real result if it won the race); the cancel
//   op completes separately. A cancel completion is never the target's completion.
// - Admission (admission.hpp): at most `capacity()` ordinary operations are in flight, so the
//   completion queue cannot overflow, and of those at most wait_capacity_for(capacity()) *waits*
//   (recv, accept, connect, io_op::waits: a peer decides when they end), so an executor always has
//   room for the operations that end by themselves (file I/O, fsync, send, close, ...), however
//   many idle connections it holds. Timeouts take no place: the backend keeps them itself. More
//   wait in one FIFO backlog per class (never dropped): a prompt operation never queues behind a
//   wait. Internal ops (see io_op::internal) use a reserve of CQ entries above the cap, which
//   prompt ops may borrow but for its last places.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace sluice::runtime {

enum class op_code : std::uint8_t {
  nop,
  read,       // fd, buf, len, offset
  write,      // fd, buf, len, offset
  fsync,      // fd
  fdatasync,  // fd
  openat,     // fd (dir), path, flags, mode
  close,      // fd
  renameat,   // fd (old dir), path, fd2 (new dir), path2
  accept,     // fd, addr, addr_len (in/out), flags
  connect,    // fd, addr, len (address length)
  send,       // fd, buf, len, flags (MSG_*)
  recv,       // fd, buf, len, flags (MSG_*)
  shutdown,   // fd, flags (SHUT_*)
  timeout,    // deadline (steady clock, absolute)
  cancel,     // target
  mkdirat,    // fd (dir), path, mode
  unlinkat,   // fd (dir), path, flags (AT_REMOVEDIR for a directory)
  statx,      // fd (dir, or the file itself with path "" and AT_EMPTY_PATH), path, flags (AT_*),
              // mode (the STATX_* mask), buf (struct statx*)
  poll,       // fd, flags (POLLIN/POLLOUT/... events): one shot; completes with the revents (> 0,
              // POLLERR/POLLHUP included whatever was asked) once the fd is ready. A wait.
};
inline constexpr int op_code_count = static_cast<int>(op_code::poll) + 1;

const char* to_string(op_code code) noexcept;

// Packed to 112 bytes (small fields first, then the 8-byte ones): every awaited operation holds
// one, zeroed in place in the awaiting coroutine's frame (io_awaitable.hpp), and at 136 bytes the
// zeroing was a `rep stos` that showed up in the nop benchmark's profile.
struct io_op {
  op_code code = op_code::nop;
  // The runtime's own operations (the executor's wake-up read, cancels): they bypass the in-flight
  // cap into a small reserve, so a ring full of long-lived operations can still be woken and can
  // still cancel; test fault rules never see them.
  bool internal = false;
  // A wait whatever its code says (a read of a signalfd or a pipe: its writer decides when it
  // ends). recv, accept and connect are waits anyway (admission.hpp).
  bool waits = false;
  std::uint8_t backend_state_ = 0;  // backend bookkeeping (below)
  int fd = -1;
  int fd2 = -1;
  std::uint32_t len = 0;
  std::uint32_t flags = 0;
  std::uint32_t mode = 0;
  // Filled by the backend: the result as the kernel reports it (>= 0, or -errno).
  std::int32_t result = 0;
  std::uint32_t heap_index_ = 0;  // backend bookkeeping (below)
  std::uint64_t offset = 0;
  void* buf = nullptr;                 // data buffer, or sockaddr for accept/connect
  const char* path = nullptr;          // openat/renameat/mkdirat/unlinkat/statx
  const char* path2 = nullptr;         // renameat
  unsigned* addr_len = nullptr;        // accept (socklen_t*)
  io_op* target = nullptr;             // cancel
  std::chrono::steady_clock::time_point deadline{};  // timeout
  // Called exactly once, on the executor thread, inside poll().
  void (*complete)(io_op& op) noexcept = nullptr;
  void* user = nullptr;

  // Backend bookkeeping: a backlog's link, the timer-heap position (heap_index_), the epoll
  // backend's op state (backend_state_), set on submit: what a caller puts there is ignored.
  io_op* next_ = nullptr;
};
static_assert(sizeof(io_op) <= 112, "io_op grew: keep it small, it is zeroed on every awaited operation");

// What a backend counts for the runtime's metrics (job_metrics, /metrics): monotonic, read on the
// executor's thread.
struct backend_counters {
  std::uint64_t submitted = 0;         // operations accepted by submit() (timeouts and cancels too)
  std::uint64_t waits = 0;             // polls that blocked for a completion
  std::chrono::nanoseconds waited{0};  // time spent blocked in them (the executor's idle time)
};

class io_backend {
 public:
  virtual ~io_backend() = default;
  virtual void submit(io_op& op) = 0;
  // Returns the number of completions dispatched.
  virtual unsigned poll(bool wait) = 0;
  // Operations accepted and not yet completed (in flight plus backlog).
  virtual std::size_t outstanding() const noexcept = 0;
  // True when there is something to hand to the kernel (or a completion to reap without waiting).
  virtual bool has_pending_work() const noexcept = 0;
  virtual std::size_t capacity() const noexcept = 0;
  // The clock timers are measured against (a virtual one in tests).
  virtual std::chrono::steady_clock::time_point now() const noexcept { return std::chrono::steady_clock::now(); }
  // True when that clock is virtual: it jumps to the next timer whenever nothing can run, so work
  // handed to another thread would race it (offload() then runs inline: offload.hpp).
  virtual bool virtual_clock() const noexcept { return false; }
  virtual const char* name() const noexcept = 0;
  // Zero for a backend that does not count (test_backend).
  virtual backend_counters counters() const noexcept { return {}; }
};

struct uring_options {
  unsigned sq_entries = 256;
  unsigned cq_entries = 1024;
  // Try SINGLE_ISSUER|DEFER_TASKRUN first; drop flags the kernel rejects.
  bool prefer_defer_taskrun = true;
};

// Creates the io_uring backend on the calling thread (the only thread allowed to use it).
// Throws std::system_error with a message naming the cause and the fix when io_uring is unavailable.
std::unique_ptr<io_backend> make_uring_backend(const uring_options& options = {});

// Creates the epoll backend on the calling thread: sockets, pipes, eventfds and signalfds by
// readiness, timeouts in a deadline heap, file operations on a few threads of its own whose
// completions come back through an eventfd (epoll_backend.cpp). For where io_uring is unavailable
// (a container's seccomp profile, kernel.io_uring_disabled, an old kernel). `options.cq_entries`
// sets the same admission limits as an io_uring with that many CQ entries; the rest is ignored.
std::unique_ptr<io_backend> make_epoll_backend(const uring_options& options = {});

// Which backend executors get (backend_select.cpp). SLUICE_BACKEND=auto|uring|epoll, read on
// every call (unset or empty: auto). auto: io_uring, or epoll when io_uring_setup fails with
// EPERM, EACCES or ENOSYS (seccomp, kernel.io_uring_disabled, a kernel without io_uring); the
// first choice of the process is logged once (info, or a warning naming why io_uring is not used).
// uring: io_uring or the error; epoll: epoll. Another value throws std::invalid_argument.
struct backend_choice {
  std::string name;    // "io_uring" or "epoll"
  std::string reason;  // why (the setting, or why io_uring is unavailable)
};
backend_choice choose_backend();
std::unique_ptr<io_backend> make_backend(const uring_options& options = {});

namespace detail {
// The message for a failed io_uring_setup: cause and fix. `disabled_sysctl` is the content of
// /proc/sys/kernel/io_uring_disabled ("" if unreadable: that file exists only on a kernel built with
// io_uring, 6.6 and later). `kernel_release` is uname's ("6.18.4-1-amd64"; "" if unknown): ENOSYS
// from a kernel of 5.1 or later, which has io_uring_setup, is a seccomp filter's (or a container
// profile's) answer, or a kernel built without CONFIG_IO_URING; never "run a newer kernel".
std::string describe_uring_setup_failure(int error, const std::string& disabled_sysctl,
                                         const std::string& kernel_release);
// The same for this machine's kernel release.
std::string describe_uring_setup_failure(int error, const std::string& disabled_sysctl);
}  // namespace detail

}  // namespace sluice::runtime
