#pragma once
// file_op_pool: the epoll backend's threads for operations that readiness cannot tell about (file
// reads and writes, fsync, openat, close, rename, mkdir, unlink, statx, writes to pipes and
// terminals). Each backend owns one pool; its threads run the blocking call and never touch
// anything but the op's arguments and result.
//
// Protocol:
// - push(op) queues `op` (FIFO) and wakes an idle thread, or starts one while fewer than
//   `max_threads` run (started on first use: a backend that never touches a file starts none). If
//   not even one thread can be started, the op runs right there, blocking (and an error is logged).
// - A thread takes an op, runs the call outside the lock (op.result = >= 0 or -errno, as the kernel
//   reports it through io_uring), then moves it to the done list and signals the pool's eventfd
//   (nonblocking), which the backend's epoll watches. take_done() hands the finished ops to the
//   backend, on its thread, which completes them there: op.complete() never runs on a pool thread.
// - remove(op) takes an op out of the queue if no thread has started it (a cancel that won);
//   an op a thread runs already cannot be stopped and ends with its real result.
// - The destructor lets the threads finish what is queued, then joins them. The backend destroys
//   its pool only when nothing is outstanding.
// - Threads block every signal (helper_thread.hpp). Each runs on a stack the pool maps itself, not
//   one from glibc's cache: in a child forked while another pool's threads ran, that cache holds
//   the stacks of the parent's live threads, and a thread started there would get a live thread's
//   id (ThreadSanitizer stops the child for it: "dup thread with used id").
// - Nothing in push() or a thread allocates (intrusive queues, the thread list reserved): out of
//   memory fails neither an op half-queued nor a thread between two ops.

#include <sluice/runtime/admission.hpp>
#include <sluice/runtime/io_backend.hpp>

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <pthread.h>
#include <vector>

namespace sluice::runtime::detail {

// The blocking system call for `op` (a file op, or a read/write of any descriptor).
std::int32_t run_blocking_op(const io_op& op) noexcept;

class file_op_pool {
 public:
  explicit file_op_pool(unsigned max_threads);
  ~file_op_pool();
  file_op_pool(const file_op_pool&) = delete;
  file_op_pool& operator=(const file_op_pool&) = delete;

  // Readable (level) while finished ops wait for take_done().
  int event_fd() const noexcept { return event_fd_; }
  void push(io_op& op);
  bool remove(const io_op& op);
  // The finished ops (in the order they finished); resets the eventfd.
  op_queue take_done();

 private:
  void thread_main();
  bool start_thread();
  void note_start_failure(const char* what, int error);
  static void* thread_entry(void* self);

  struct worker {
    pthread_t id{};
    void* stack = nullptr;
  };

  const unsigned max_threads_;
  int event_fd_ = -1;
  std::mutex mutex_;
  std::condition_variable wake_;
  // Both linked through io_op::next_ (an op is in one of them at a time): nothing a thread does
  // allocates, so a thread never fails for want of memory and every op it took completes.
  op_queue queue_;
  op_queue done_;
  std::vector<worker> threads_;  // reserved for max_threads_ up front
  unsigned idle_ = 0;
  bool stopping_ = false;
  bool start_failure_noted_ = false;
};

}  // namespace sluice::runtime::detail
