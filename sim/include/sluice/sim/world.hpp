#pragma once
// world: one simulated machine on one thread. It is the kernel of every executor of an engine run
// under it (engine_options::simulation): their I/O backends submit here, the synchronous calls of
// the job (system.hpp) land here, and `run` decides, with one seeded random source, which executor
// takes the next turn and which operation completes next, with what result.
//
// - Time is virtual: each step advances it by a few hundred nanoseconds; when nothing can run, it
//   jumps to the next timer or delayed completion. Nothing reads a real clock.
// - Storage is a `disk` (visible and durable states), networking a `network` (loopback TCP).
// - Faults (fault_rates, per million operations) happen only in the first `faults_for` of simulated
//   time: I/O errors, a full disk, short reads and writes, slow operations, connection resets,
//   refused connects, stalled connections, cancels that arrive after their target completed.
// - At step `crash_at_step` (which the driver may move while the job runs), `on_crash` is called:
//   the driver takes the disk's crash image and ends the process (nothing after that point may
//   run, as after kill -9).
// - A run that can no longer progress (nothing ready, no timer, no completion possible), that goes
//   on past `liveness_limit` after the faults stopped, or that exceeds a step budget (step_limit,
//   idle_step_limit) throws `hang`, with what every executor waits for.
// - Every decision is folded into `trace_hash()`; with `trace` set, it is also printed.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/simulation.hpp>
#include <sluice/runtime/system.hpp>
#include <sluice/sim/disk.hpp>
#include <sluice/sim/disk_image.hpp>
#include <sluice/sim/network.hpp>
#include <sluice/sim/random.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::sim {

struct fault_rates {
  std::uint32_t disk_error = 0;   // EIO from a read, write or fsync
  std::uint32_t disk_full = 0;    // ENOSPC from a write
  std::uint32_t short_io = 0;     // a read, write, send or recv moves fewer bytes than asked
  std::uint32_t slow_io = 0;      // an operation takes 5 to 80 ms
  std::uint32_t net_reset = 0;    // a send or recv resets its connection
  std::uint32_t net_refuse = 0;   // a connect is refused
  std::uint32_t net_stall = 0;    // a send stalls its connection's delivery for 1 to 60 ms
  std::uint32_t cancel_late = 0;  // a cancel finds its target already done
  std::uint32_t ring_busy = 0;    // a submission finds the ring busy (EBUSY): it waits in the backlog
};

struct world_options {
  std::uint64_t seed = 1;
  fault_rates faults{};
  std::chrono::nanoseconds faults_for{0};
  // How long after the faults stopped the job may still run before it counts as hung.
  std::chrono::nanoseconds liveness_limit = std::chrono::seconds(600);
  std::uint64_t crash_at_step = 0;  // 0: never
  // Budgets (0: none). A process that takes more than `step_limit` steps, or more than
  // `idle_step_limit` steps in a row in which no operation completes and time never jumps to a
  // timer (coroutines resuming one another and nothing else: a busy loop), is hung.
  std::uint64_t step_limit = 0;
  std::uint64_t idle_step_limit = 0;
  // When not 0: report a hang just before step N runs, with what everything waits for (how a driver
  // sees what went on before a step that never ended).
  std::uint64_t describe_at_step = 0;
  // When set, the step count is stored here as each step begins: shared memory, where a watchdog in
  // another process sees a process spin inside one step (which no budget above can see).
  std::atomic<std::uint64_t>* published_steps = nullptr;
  std::function<void(class world&)> on_crash;
  // At step `alarm_at_step` (0: never; the driver may move it), `on_alarm` runs between two steps:
  // where a driver does what the host would at a moment the seed chose (a SIGTERM's stop request).
  std::uint64_t alarm_at_step = 0;
  std::function<void(class world&)> on_alarm;
  // Called instead of throwing `hang` when set (a hang found inside a destructor cannot throw).
  std::function<void(class world&, const std::string& why)> on_hang;
  // How many ready coroutines an executor resumes per turn, at most (the engine's batch limit).
  unsigned batch_limit = 4;
  // Operations an executor's ring holds in flight (its SQ/CQ cap), admitted as io_uring's are
  // (runtime/admission.hpp: waits take at most wait_capacity_for(ring_entries) of them); more wait
  // in their class's FIFO backlog until one completes. Internal ones (wake-up reads, cancels) use a
  // reserve. 0: no limit.
  std::size_t ring_entries = 0;
  std::string working_directory = "/sim";
  std::FILE* trace = nullptr;
};

class hang : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class world final : public runtime::simulation, public runtime::system {
 public:
  using clock = std::chrono::steady_clock;

  explicit world(world_options options, const disk_image& image = {});
  ~world() override;

  // --- simulation ---------------------------------------------------------------------------
  std::unique_ptr<runtime::io_backend> make_backend(int index) override;
  runtime::system& kernel() noexcept override { return *this; }
  void run(std::span<runtime::executor* const> executors, bool (*done)(void*), void* context) override;
  // Any of the ready coroutines, uniformly: the order within a turn is the seed's too.
  std::size_t pick_ready(std::size_t ready) noexcept override { return random_.below(ready); }

  // --- what drivers and tests look at ---------------------------------------------------------
  disk& storage() noexcept { return disk_; }
  network& net() noexcept { return net_; }
  rng& random() noexcept { return random_; }
  clock::time_point now() const noexcept { return now_; }
  std::chrono::nanoseconds elapsed() const noexcept { return now_ - start_; }
  std::uint64_t steps() const noexcept { return steps_; }
  // The most steps in a row in which no operation completed and time did not jump (idle_step_limit).
  std::uint64_t longest_idle_run() const noexcept { return longest_idle_; }
  std::uint64_t trace_hash() const noexcept { return hash_; }
  std::uint64_t faults_injected() const noexcept { return faults_injected_; }
  bool faults_active() const noexcept { return now_ - start_ < options_.faults_for; }
  std::size_t open_descriptors() const noexcept { return fds_.size(); }
  std::size_t pending_operations() const noexcept;  // in the rings and their backlogs
  std::size_t backlogged_operations() const noexcept;  // in the backlogs only
  // One line per operation still waiting, and per executor that could run.
  std::string describe_waits(std::span<runtime::executor* const> executors) const;
  const world_options& options() const noexcept { return options_; }
  // Moves the crash to `step` (0: never), e.g. a few steps after something the driver saw happen.
  void crash_at_step(std::uint64_t step) noexcept { options_.crash_at_step = step; }
  // Moves the alarm to `step` (0: never).
  void alarm_at_step(std::uint64_t step) noexcept { options_.alarm_at_step = step; }

  // --- system (the synchronous calls) ---------------------------------------------------------
  int socket(int domain, int type, int protocol) noexcept override;
  int setsockopt(int fd, int level, int name, const void* value, socklen_t size) noexcept override;
  int getsockopt(int fd, int level, int name, void* value, socklen_t* size) noexcept override;
  int bind(int fd, const sockaddr* addr, socklen_t size) noexcept override;
  int listen(int fd, int backlog) noexcept override;
  int getsockname(int fd, sockaddr* addr, socklen_t* size) noexcept override;
  int shutdown(int fd, int how) noexcept override;
  int close(int fd) noexcept override;
  int open(const char* path, int flags, mode_t mode) noexcept override;
  ssize_t pread(int fd, void* buf, std::size_t len, off_t offset) noexcept override;
  ssize_t pwrite(int fd, const void* buf, std::size_t len, off_t offset) noexcept override;
  int fsync(int fd) noexcept override;
  int ftruncate(int fd, off_t length) noexcept override;
  int fstat(int fd, struct stat* st) noexcept override;
  int flock(int fd, int operation) noexcept override;
  int stat(const char* path, struct stat* st) noexcept override;
  int lstat(const char* path, struct stat* st) noexcept override;  // (the disk has no symlinks: stat)
  int readlink(const char* path, std::string& target) noexcept override;
  int mkdir(const char* path, mode_t mode) noexcept override;
  int unlink(const char* path) noexcept override;
  int rmdir(const char* path) noexcept override;
  int rename(const char* from, const char* to) noexcept override;
  int list_directory(const char* dir, std::vector<std::string>& names, std::size_t max_entries) noexcept override;
  std::string current_directory() override { return options_.working_directory; }
  int realpath(const char* path, std::string& resolved) noexcept override;
  int getpid() noexcept override { return 4242; }
  // Time passes for the sleeper only: nothing else runs meanwhile (it is a blocking call).
  int nanosleep(std::chrono::nanoseconds duration) noexcept override;
  std::chrono::system_clock::time_point wall_now() noexcept override;
  std::uint64_t random_bits() noexcept override { return random_.next(); }

  // Prints one trace line (when tracing) and folds `a`, `b` into the trace hash.
  void note(const char* what, std::int64_t a, std::int64_t b, const std::string& detail = {});

 private:
  class backend;
  friend class backend;

  struct descriptor {
    enum class kind : std::uint8_t { file, directory, socket } what = kind::file;
    disk::ino inode = 0;
    int socket = -1;
    int access = 0;  // O_RDONLY, O_WRONLY or O_RDWR
    bool append = false;
    std::uint64_t cursor = 0;
    std::string path;
  };
  struct pending_op {
    runtime::io_op* op = nullptr;
    backend* owner = nullptr;
    clock::time_point ready_at{};
    std::uint64_t seq = 0;
  };

  // Simulated descriptors start here, far from the real ones the process has (eventfds, stdio).
  static constexpr int first_descriptor = 1000;
  // What the trace says of descriptor `fd`: the simulated machine's as it is, the host's (an
  // executor's eventfd: its number depends on what else the process has open, e.g. --trace's
  // stderr, not on the seed) as -2, so the trace hash is the seed's alone.
  static std::int64_t traced(int fd) noexcept { return fd >= 0 && fd < first_descriptor ? -2 : fd; }

  [[noreturn]] void report_hang(const std::string& why);
  void check_budgets(std::span<runtime::executor* const> executors);

  // world_ops.cpp: the asynchronous operations.
  void submit(backend& b, runtime::io_op& op);
  bool can_complete(const pending_op& p) const;
  std::int32_t perform(runtime::io_op& op);
  std::int32_t perform_file(runtime::io_op& op, descriptor& d);
  std::int32_t perform_statx(runtime::io_op& op);
  std::int32_t perform_socket(runtime::io_op& op, descriptor& d);
  clock::duration latency(const runtime::io_op& op);
  clock::time_point wake_time(const pending_op& p) const;
  void complete(std::size_t index);
  void cancel(backend& b, runtime::io_op& cancel_op);
  bool cancel_in_backlog(backend& b, runtime::io_op& cancel_op);
  void drain_backlogs();
  bool fault(std::uint32_t per_million);

  // world_system.cpp: descriptors and paths.
  int add_descriptor(descriptor d);
  descriptor* find(int fd) noexcept;
  const descriptor* find(int fd) const noexcept;
  bool absolute(int dir_fd, const char* path, std::string& out) const;
  int open_at(int dir_fd, const char* path, int flags);
  void release_descriptor(int fd);

  world_options options_;
  rng random_;
  disk disk_;
  network net_;
  clock::time_point start_;
  clock::time_point now_;
  std::uint64_t steps_ = 0;
  std::uint64_t idle_steps_ = 0;  // turns since an operation completed or time jumped
  std::uint64_t longest_idle_ = 0;
  std::uint64_t hash_ = 0xcbf29ce484222325ull;
  std::uint64_t seq_ = 0;
  std::uint64_t faults_injected_ = 0;
  std::map<int, descriptor> fds_;
  std::map<disk::ino, int> locks_;  // flock: inode -> the descriptor holding it
  std::vector<pending_op> pending_;
  std::vector<backend*> backends_;
};

}  // namespace sluice::sim
