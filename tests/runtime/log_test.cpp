// Logging (log.hpp): an executor's lines go to a bounded queue drained by a writer thread, so a
// stderr that nobody reads never blocks it; what does not fit is dropped and counted; each thread's
// lines keep their order.

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/death.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

// Points fd 2 at a pipe while alive; drain() reads what is in it.
class stderr_pipe {
 public:
  explicit stderr_pipe(int capacity_bytes = 0) {
    log::flush();
    if (::pipe2(fds_, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    if (capacity_bytes > 0) (void)::fcntl(fds_[1], F_SETPIPE_SZ, capacity_bytes);
    saved_ = ::dup(2);
    ::dup2(fds_[1], 2);
  }
  stderr_pipe(const stderr_pipe&) = delete;
  stderr_pipe& operator=(const stderr_pipe&) = delete;
  ~stderr_pipe() {
    restore();
    ::close(fds_[0]);
  }
  // fd 2 back to what it was; what was written stays readable.
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
    ::close(fds_[1]);
  }
  int read_end() const noexcept { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
  int saved_ = -1;
};

// Everything until end of file.
std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

task<void> log_numbered(int from, int to) {
  for (int i = from; i < to; ++i) log::error("line {}", i);  // shown at every level
  co_return;
}

}  // namespace

TEST_CASE("an executor's log lines reach stderr in order once flushed, and a thread off any executor writes "
          "after them",
          "[log]") {
  std::string text;
  {
    stderr_pipe pipe;
    std::thread reader([&] { text = read_all(pipe.read_end()); });
    sync_wait(log_numbered(0, 200));
    log::error("line {}", 200);  // off an executor: inline, after what the executor queued
    log::flush();
    pipe.restore();
    reader.join();
  }
  const std::vector<std::string> lines = lines_of(text);
  REQUIRE(lines.size() == 201);
  for (int i = 0; i < 201; ++i) {
    CHECK_THAT(lines[static_cast<std::size_t>(i)], Catch::EndsWith("line " + std::to_string(i)));
  }
  CHECK_THAT(lines[0], Catch::Contains("error ex0 line 0"));
  CHECK_THAT(lines[200], Catch::Contains("error -- line 200"));
}

namespace {
struct sunk {
  log_level level;
  int executor;
  std::string text, line;
};
}  // namespace

TEST_CASE("a sink takes every line instead of stderr, with its level, executor and text, in order", "[log]") {
  std::vector<sunk> got;  // the sink is called one call at a time: no lock needed for the vector itself
  std::mutex m;
  std::string on_stderr;
  {
    stderr_pipe pipe;
    std::thread reader([&] { on_stderr = read_all(pipe.read_end()); });
    (void)log::set_sink([&](const log::event& e) {
      std::lock_guard lock(m);
      got.push_back({e.level, e.executor, std::string(e.text), std::string(e.line)});
    });
    sync_wait(log_numbered(0, 50));
    log::warn("off {}", "an executor");
    log::flush();
    (void)log::set_sink({});  // back to stderr
    log::error("after the sink");
    log::flush();
    pipe.restore();
    reader.join();
  }
  std::lock_guard lock(m);
  REQUIRE(got.size() == 51);
  for (int i = 0; i < 50; ++i) {
    const sunk& e = got[static_cast<std::size_t>(i)];
    CHECK(e.level == log_level::error);
    CHECK(e.executor == 0);
    CHECK(e.text == "line " + std::to_string(i));
    CHECK_THAT(e.line, Catch::EndsWith("error ex0 line " + std::to_string(i)));
  }
  CHECK(got[50].level == log_level::warn);
  CHECK(got[50].executor == -1);
  CHECK(got[50].text == "off an executor");
  CHECK_THAT(got[50].line, Catch::Contains("warn  -- off an executor"));
  // Nothing of that reached stderr; the line after the sink was removed did.
  CHECK(lines_of(on_stderr).size() == 1);
  CHECK_THAT(on_stderr, Catch::Contains("after the sink"));
}

TEST_CASE("a log line never blocks an executor on a stderr nobody reads: what does not fit is dropped and counted",
          "[log]") {
  constexpr int total = 20'000;
  const std::uint64_t dropped_before = log::dropped_lines();
  std::string text;
  {
    stderr_pipe pipe(4096);  // a few dozen lines fill it; nobody reads it until the executor is done
    auto logged = std::async(std::launch::async, [] { sync_wait(log_numbered(0, total)); });
    // The bound ends only the failure case (an executor blocked in a write to the full pipe).
    const bool returned = logged.wait_for(60s) == std::future_status::ready;
    std::thread reader([&] { text = read_all(pipe.read_end()); });
    logged.wait();
    log::flush();
    pipe.restore();
    reader.join();
    REQUIRE(returned);
  }
  const std::uint64_t dropped = log::dropped_lines() - dropped_before;
  CHECK(dropped > 0);
  // What came through is in order, and with the dropped count it makes up every line.
  std::uint64_t kept = 0;
  std::uint64_t reported = 0;
  int last = -1;
  bool ordered = true;
  // (no <regex>: GCC 12 at -O1 under ASan warns falsely inside it, -Wmaybe-uninitialized)
  const std::string note = "sluice: log: ";
  for (const std::string& line : lines_of(text)) {
    if (const auto at = line.find(note); at != std::string::npos && line.find(" line(s) dropped", at) != std::string::npos) {
      reported += std::stoull(line.substr(at + note.size()));
      continue;
    }
    const auto at = line.rfind("line ");
    REQUIRE(at != std::string::npos);
    const int n = std::stoi(line.substr(at + 5));
    if (n <= last) ordered = false;
    last = n;
    ++kept;
  }
  CHECK(ordered);
  CHECK(reported == dropped);
  CHECK(kept + dropped == total);
}

TEST_CASE("a forked child that logs from an executor and exits shows its lines", "[log]") {
  const auto end = sluice::test::run_in_child([] { sync_wait(log_numbered(0, 3)); });
  CHECK(end.exit_code == 0);
  CHECK_THAT(end.stderr_text, Catch::Contains("ex0 line 0") && Catch::Contains("ex0 line 2"));
}

TEST_CASE("log lines carry their journald priority when stderr is the journal's stream") {
  // systemd sets JOURNAL_STREAM=<dev>:<ino> of the service's stderr; a line starting "<N>" is then
  // logged at priority N. The child's stderr is a pipe: JOURNAL_STREAM names it, then another file.
  const auto as_journal = sluice::test::run_in_child([] {
    struct stat st {};
    if (::fstat(STDERR_FILENO, &st) != 0) ::_exit(3);
    const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    ::setenv("JOURNAL_STREAM", stream.c_str(), 1);
    sluice::runtime::log::error("an error for the journal");
    sluice::runtime::log::warn("a warning for the journal");
    sluice::runtime::log::flush();
  });
  CHECK(as_journal.exit_code == 0);
  CHECK(as_journal.stderr_text.find("<3>") == 0);
  CHECK(as_journal.stderr_text.find("\n<4>") != std::string::npos);
  CHECK(as_journal.stderr_text.find("a warning for the journal") != std::string::npos);

  const auto elsewhere = sluice::test::run_in_child([] {
    ::setenv("JOURNAL_STREAM", "1:1", 1);  // another file: a terminal or a pipe of the user's
    sluice::runtime::log::error("an error for a person");
    sluice::runtime::log::flush();
  });
  CHECK(elsewhere.exit_code == 0);
  CHECK(elsewhere.stderr_text.find('<') == std::string::npos);
  CHECK(elsewhere.stderr_text.find("an error for a person") != std::string::npos);
}
