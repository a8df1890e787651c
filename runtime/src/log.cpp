// Logging (see log.hpp).
//
// Protocol: a line is formatted on the calling thread. On an executor thread (with the host system)
// it is queued for the writer thread, which takes every queued line at once and writes them to fd 2
// outside the lock: a slow or blocked stderr stalls the writer, never an executor. The queue is
// bounded (max_queued_lines, max_queued_bytes); a line that does not fit is dropped and counted, and
// the count is written before the next batch. Any other thread (and every thread under a
// simulation or a stand-in system) writes inline: it waits for its turn at fd 2 (`writing`), first
// writes what is queued, then its own line, so each thread's lines keep their order whichever way
// they go. flush() waits until everything queued before it is written; it runs at exit and before
// a fatal error ends the process. A forked child starts with an empty queue and no writer thread
// (the parent's queued lines are the parent's to write).

#include <sluice/runtime/executor.hpp>

#include "helper_thread.hpp"
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/system.hpp>

#include <fmt/format.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::runtime::log {
namespace {

log_level parse_env() noexcept {
  const char* v = std::getenv("SLUICE_LOG");
  if (v == nullptr || *v == '\0') return log_level::warn;
  if (std::strcmp(v, "error") == 0) return log_level::error;
  if (std::strcmp(v, "warn") == 0 || std::strcmp(v, "warning") == 0) return log_level::warn;
  if (std::strcmp(v, "info") == 0) return log_level::info;
  if (std::strcmp(v, "debug") == 0) return log_level::debug;
  std::fprintf(stderr, "sluice: SLUICE_LOG='%s' is not one of error|warn|info|debug; using warn\n", v);
  return log_level::warn;
}

std::atomic<int>& current_level() noexcept {
  static std::atomic<int> level{static_cast<int>(parse_env())};
  return level;
}

constexpr const char* names[] = {"error", "warn", "info", "debug"};

constexpr std::size_t max_queued_lines = 4096;
constexpr std::size_t max_queued_bytes = 1u << 20;
// flush() gives up after this long: a fatal error must still end the process when stderr is stuck.
constexpr auto max_flush_wait = std::chrono::seconds(5);

// All of `text` to fd 2; false once the descriptor refuses it (closed, EPIPE, ...).
bool write_stderr(const char* text, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, size);
    if (n > 0) {
      text += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{STDERR_FILENO, POLLOUT, 0};
      (void)::poll(&p, 1, -1);  // a non-blocking stderr: wait until it takes more
    } else {
      return false;
    }
  }
  return true;
}

// Whether stderr is the systemd journal's stream (JOURNAL_STREAM names its device and inode, as
// systemd sets it for a service's stderr). Then each line starts with its priority, "<3>" to
// "<7>" (sd-daemon(3)), so that `journalctl -p warning` finds the warnings.
bool stderr_is_journal() noexcept {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  return ::fstat(STDERR_FILENO, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

std::string_view journal_priority(log_level level) noexcept {
  switch (level) {
    case log_level::error: return "<3>";
    case log_level::warn: return "<4>";
    case log_level::info: return "<6>";
    case log_level::debug: return "<7>";
  }
  return {};
}

// One line: as stderr shows it (with its newline), and its parts for a sink.
struct entry {
  std::string line;
  log_level level = log_level::info;
  int executor = -1;
  std::chrono::system_clock::time_point time;
  std::size_t text_at = 0;  // where the message starts in `line`
};

struct writer {
  std::mutex mutex;
  std::condition_variable work;     // the writer thread waits for lines (and for its turn)
  std::condition_variable written;  // flush() waits for written_seq
  std::vector<entry> lines;
  std::shared_ptr<const sink> to;  // empty: stderr
  std::size_t bytes = 0;
  std::uint64_t dropped = 0;        // since the last batch
  std::uint64_t dropped_total = 0;  // reported so far
  std::uint64_t queued_seq = 0;   // lines queued, ever
  std::uint64_t written_seq = 0;  // of those, written (or taken by an inline writer)
  bool writing = false;           // someone is writing to fd 2 now
  bool started = false;
  bool stopping = false;
  std::thread thread;

  // Takes the queue and the drop count (under the lock) and writes them, then `own` (outside it).
  void write_batch(std::unique_lock<std::mutex>& lock, const entry* own) {
    writing = true;
    std::vector<entry> batch;
    batch.swap(lines);
    bytes = 0;
    const std::uint64_t lost = std::exchange(dropped, 0);
    dropped_total += lost;
    const std::shared_ptr<const sink> destination = to;
    lock.unlock();
    // Nothing here may throw: out of memory (the note, the joined text) writes what it can without
    // allocating, line by line, rather than end the writer thread (std::terminate).
    char note[96];
    std::string_view lost_note;
    if (lost != 0) {
      const auto n = fmt::format_to_n(note, sizeof note, "sluice: log: {} line(s) dropped: the log did not keep up\n", lost);
      lost_note = std::string_view(note, std::min(n.size, sizeof note));
    }
    if (destination) {
      if (!lost_note.empty()) deliver(*destination, lost_note, log_level::warn);
      for (const entry& e : batch) deliver(*destination, e);
      if (own != nullptr) deliver(*destination, *own);
    } else {
      write_joined(lost_note, batch, own);
    }
    lock.lock();
    writing = false;
    written_seq += batch.size();
    written.notify_all();
    work.notify_all();
  }

  // The lines to stderr in one write when memory allows, else one write each; each with its
  // priority first when stderr is the journal.
  static void write_joined(std::string_view lost_note, const std::vector<entry>& batch, const entry* own) noexcept {
    const bool journal = stderr_is_journal();
    const auto priority = [journal](log_level l) { return journal ? journal_priority(l) : std::string_view(); };
    try {
      std::string text;
      if (!lost_note.empty()) text.append(priority(log_level::warn)).append(lost_note);
      for (const entry& e : batch) text.append(priority(e.level)).append(e.line);
      if (own != nullptr) text.append(priority(own->level)).append(own->line);
      (void)write_stderr(text.data(), text.size());
    } catch (...) {
      const auto one = [&priority](log_level l, std::string_view line) {
        const std::string_view p = priority(l);
        (void)write_stderr(p.data(), p.size());
        (void)write_stderr(line.data(), line.size());
      };
      if (!lost_note.empty()) one(log_level::warn, lost_note);
      for (const entry& e : batch) one(e.level, e.line);
      if (own != nullptr) one(own->level, own->line);
    }
  }

  static void deliver(const sink& to, std::string_view note, log_level level) noexcept {
    try {
      deliver(to, entry{std::string(note), level, -1, {}, 0});
    } catch (...) {  // (no memory for the note)
    }
  }

  static void deliver(const sink& to, const entry& e) noexcept {
    try {
      std::string_view line(e.line);
      if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
      to(event{e.level, e.executor, e.time, line.substr(std::min(e.text_at, line.size())), line});
    } catch (...) {
      // A sink that throws loses that line, nothing more.
    }
  }

  void run() {
    detail::block_all_signals();
    std::unique_lock lock(mutex);
    for (;;) {
      work.wait(lock, [this] { return !writing && (!lines.empty() || dropped != 0 || stopping); });
      if (lines.empty() && dropped == 0) return;  // stopping, and nothing left
      write_batch(lock, nullptr);
    }
  }
};

writer* the_writer = nullptr;

void stop_writer_at_exit();

void new_writer_in_child() {
  // The parent's writer thread does not exist here and its lock may be held: start afresh, leaking
  // the old state (its std::thread must never be destroyed while "joinable").
  if (the_writer != nullptr) the_writer = new writer;
}

writer& get_writer() {
  static writer* w = [] {
    the_writer = new writer;
    pthread_atfork(nullptr, nullptr, &new_writer_in_child);
    std::atexit(&stop_writer_at_exit);
    return the_writer;
  }();
  (void)w;
  return *the_writer;
}

void stop_writer_at_exit() {
  flush();
  writer& w = *the_writer;
  std::thread thread;
  bool stuck = false;
  {
    std::lock_guard lock(w.mutex);
    w.stopping = true;
    stuck = w.writing;  // still in a write to a stderr that takes nothing: do not wait for it
    thread.swap(w.thread);
  }
  w.work.notify_all();
  if (thread.joinable() && stuck) {
    thread.detach();
    return;
  }
  if (thread.joinable()) thread.join();
  // Whatever was queued after the thread ended.
  std::unique_lock lock(w.mutex);
  if (!w.lines.empty() || w.dropped != 0) w.write_batch(lock, nullptr);
}

// Lines from an executor thread go through the queue; any other thread writes its own.
bool queued_here() noexcept { return executor::current() != nullptr && &current_system() == &host_system(); }

void write_inline(writer& w, const entry& line) {
  std::unique_lock lock(w.mutex);
  w.work.wait(lock, [&w] { return !w.writing; });
  w.write_batch(lock, &line);
}

void enqueue(writer& w, entry&& line) {
  std::unique_lock lock(w.mutex);
  if (w.stopping) {  // at exit: no writer thread any more
    lock.unlock();
    write_inline(w, line);
    return;
  }
  if (w.lines.size() >= max_queued_lines || w.bytes + line.line.size() > max_queued_bytes) {
    ++w.dropped;
    return;
  }
  w.bytes += line.line.size();
  w.lines.push_back(std::move(line));
  ++w.queued_seq;
  if (!w.started) {
    w.started = true;
    w.thread = std::thread([&w] { w.run(); });
  }
  if (!w.writing) w.work.notify_one();
}

}  // namespace

log_level level() noexcept { return static_cast<log_level>(current_level().load(std::memory_order_relaxed)); }
void set_level(log_level l) noexcept { current_level().store(static_cast<int>(l), std::memory_order_relaxed); }

void write_unformatted(log_level at, std::string_view format) noexcept {
  // Straight to stderr from a buffer on the stack: what failed was an allocation.
  char line[512];
  const auto n = fmt::format_to_n(line, sizeof line - 1, "sluice: log: out of memory formatting a line ({}): {}",
                                  names[static_cast<int>(at)], format);
  std::size_t size = std::min(n.size, sizeof line - 1);
  line[size++] = '\n';
  (void)write_stderr(line, size);
}

void write(log_level at, std::string_view message) noexcept {
  try {
    const auto now = std::chrono::system_clock::now();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    executor* ex = executor::current();
    fmt::memory_buffer line;
    fmt::format_to(std::back_inserter(line), "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {:5} ", tm.tm_year + 1900,
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms, names[static_cast<int>(at)]);
    if (ex != nullptr) {
      fmt::format_to(std::back_inserter(line), "ex{} ", ex->id());
    } else {
      fmt::format_to(std::back_inserter(line), "-- ");
    }
    const std::size_t text_at = line.size();
    line.append(message);
    line.push_back('\n');
    writer& w = get_writer();
    entry e{std::string(line.data(), line.size()), at, ex != nullptr ? static_cast<int>(ex->id()) : -1, now, text_at};
    if (queued_here()) {
      enqueue(w, std::move(e));
    } else {
      write_inline(w, e);
    }
  } catch (...) {
    // Logging must never take the process down.
  }
}

void flush() noexcept {
  try {
    writer& w = get_writer();
    std::unique_lock lock(w.mutex);
    const std::uint64_t target = w.queued_seq;
    if (!w.started) {
      // No writer thread (a forked child's first lines, or none yet): write what is queued here.
      if (!w.lines.empty() || w.dropped != 0) {
        w.work.wait(lock, [&w] { return !w.writing; });
        w.write_batch(lock, nullptr);
      }
      return;
    }
    w.work.notify_all();
    // Written, and so is the count of any line dropped meanwhile.
    (void)w.written.wait_for(lock, max_flush_wait,
                             [&w, target] { return w.written_seq >= target && w.dropped == 0 && !w.writing; });
  } catch (...) {
  }
}

sink set_sink(sink s) {
  auto next = s ? std::make_shared<const sink>(std::move(s)) : std::shared_ptr<const sink>();
  writer& w = get_writer();
  std::unique_lock lock(w.mutex);
  w.work.wait(lock, [&w] { return !w.writing; });  // no call to the previous sink runs after this
  std::shared_ptr<const sink> previous = std::exchange(w.to, std::move(next));
  return previous ? *previous : sink();
}

std::uint64_t dropped_lines() noexcept {
  try {
    writer& w = get_writer();
    std::lock_guard lock(w.mutex);
    return w.dropped_total + w.dropped;
  } catch (...) {
    return 0;
  }
}

}  // namespace sluice::runtime::log
