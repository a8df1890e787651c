// The sluice tool as a service: SIGTERM stops a job with a final checkpoint (exit 0, "stopped
// (resumable)"), the next start resumes from that checkpoint and the output is exactly a one-process
// run's; under systemd (NOTIFY_SOCKET pointing at a datagram socket this test reads, as systemd's
// own) the tool says READY=1 once running, STATUS= lines, WATCHDOG=1 when WATCHDOG_USEC asks for it,
// and STOPPING=1 with EXTEND_TIMEOUT_USEC= when the stop begins. SIGINT still stops at once (130).

#include "cluster_support.hpp"

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::test;
using namespace std::chrono_literals;

namespace {

// A datagram socket bound at `path`, as systemd's notification socket.
class notify_socket {
 public:
  explicit notify_socket(std::string path) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path_.size() < sizeof addr.sun_path);
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~notify_socket() { ::close(fd_); }
  notify_socket(const notify_socket&) = delete;
  notify_socket& operator=(const notify_socket&) = delete;
  const std::string& path() const { return path_; }

  // Reads datagrams until one contains `what` (returned), or `within` passed (empty).
  std::string wait_for(const std::string& what, std::chrono::milliseconds within) {
    const auto give_up = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < give_up) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) continue;
      std::string message(buf, static_cast<std::size_t>(n));
      seen_.push_back(message);
      if (message.find(what) != std::string::npos) return message;
    }
    return {};
  }
  const std::vector<std::string>& seen() const { return seen_; }
  std::string all() const {
    std::string out;
    for (const auto& m : seen_) out += "[" + m + "]\n";
    return out;
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> seen_;
};

struct service_fixture {
  temp_dir dir;
  std::string input = dir.file("in.txt");
  std::string reference = dir.file("reference");
  std::string output = dir.file("out");
  std::string chk = dir.file("chk");
  service_fixture() {
    REQUIRE(run_sluice({"corpus", "--output", input, "--lines", "1500000", "--seed", "21"}).exit_code == 0);
    const tool_run ref = run_sluice({"wordcount", "--input", input, "--output", reference, "--window-lines", "1000",
                                     "--checkpoint-dir", dir.file("reference-chk"), "--quiet"});
    REQUIRE(ref.exit_code == 0);
  }
  std::vector<std::string> args() const {
    return {"wordcount", "--input", input, "--output", output, "--window-lines", "1000", "--checkpoint-dir", chk,
            "--checkpoint-interval-ms", "100",
            // Still running when the test sends SIGTERM: the job alone takes about a second here.
            "--slow-sink-us", "20"};
  }
};

}  // namespace

TEST_CASE("under systemd: READY=1, STATUS=, WATCHDOG=1, then SIGTERM drains (STOPPING=1, exit 0) and the restart resumes exactly") {
  service_fixture f;
  notify_socket sock(f.dir.file("notify.sock"));
  auto job = std::make_unique<tool_process>(
      f.args(), f.dir.file("run1.log"), "",
      std::vector<std::string>{"NOTIFY_SOCKET=" + sock.path(), "WATCHDOG_USEC=400000"});
  const std::string ready = sock.wait_for("READY=1", 30s);
  INFO("notifications:\n" << sock.all() << "log:\n" << job->log());
  REQUIRE_FALSE(ready.empty());
  CHECK(ready.find("STATUS=running, fresh start") != std::string::npos);
  CHECK_FALSE(sock.wait_for("WATCHDOG=1", 5s).empty());
  CHECK_FALSE(sock.wait_for("STATUS=", 5s).empty());
  std::this_thread::sleep_for(300ms);  // a checkpoint or two
  REQUIRE(job->running());             // (the input is large enough to be running still)
  job->kill(SIGTERM);
  const std::string stopping = sock.wait_for("STOPPING=1", 30s);
  CHECK_FALSE(stopping.empty());
  CHECK(stopping.find("EXTEND_TIMEOUT_USEC=") != std::string::npos);
  const std::optional<int> code = job->wait(60s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  const std::string log = job->log();
  CHECK(log.find("stopped (resumable)") != std::string::npos);
  CHECK(log.find("stopped with checkpoint") != std::string::npos);
  const std::vector<std::string> expected = published_lines(f.reference);
  const std::vector<std::string> after_stop = published_lines(f.output);
  CHECK(after_stop.size() < expected.size());

  // The next start resumes from the drain's checkpoint and ends with exactly the reference output.
  notify_socket sock2(f.dir.file("notify2.sock"));
  tool_process again(f.args(), f.dir.file("run2.log"), "", std::vector<std::string>{"NOTIFY_SOCKET=" + sock2.path()});
  const std::string ready2 = sock2.wait_for("READY=1", 30s);
  CHECK(ready2.find("resumed from checkpoint") != std::string::npos);
  const std::optional<int> code2 = again.wait(120s);
  INFO("second run:\n" << again.log());
  REQUIRE(code2.has_value());
  CHECK(*code2 == 0);
  CHECK(again.log().find("resumed from checkpoint") != std::string::npos);
  CHECK(published_lines(f.output) == expected);
}

// A service manager that does not read its notification socket (a busy PID 1; a unix datagram
// queue holds net.unix.max_dgram_qlen messages, 10 by default): the notifications wait on the job's
// host thread, never on an executor, and are sent without waiting (one that does not fit is dropped,
// logged once), so the job runs to its end and exits meanwhile.
TEST_CASE("a notification socket nobody reads never stalls the job") {
  service_fixture f;
  notify_socket sock(f.dir.file("notify.sock"));
  // Pings every 25 ms: the queue is full within a fraction of the run.
  tool_process job(f.args(), f.dir.file("run.log"), "",
                   std::vector<std::string>{"NOTIFY_SOCKET=" + sock.path(), "WATCHDOG_USEC=100000"});
  const std::vector<std::string> expected = published_lines(f.reference);
  const auto give_up = std::chrono::steady_clock::now() + 120s;
  while (published_lines(f.output) != expected && std::chrono::steady_clock::now() < give_up && job.running()) {
    std::this_thread::sleep_for(50ms);
  }
  INFO("log:\n" << job.log());
  CHECK(published_lines(f.output) == expected);  // done while nothing was read
  // And it exits: a notification that does not fit is dropped, never waited for.
  const std::optional<int> code = job.wait(60s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  CHECK(job.log().find("notifications are dropped") != std::string::npos);
  CHECK(sock.wait_for("READY=1", 1s).find("READY=1") != std::string::npos);  // the queue kept the first
}

TEST_CASE("SIGINT stops at once (exit 130), --on-sigterm now makes SIGTERM do the same, and both resume exactly") {
  service_fixture f;
  for (const char* how : {"SIGINT", "SIGTERM --on-sigterm now"}) {
    INFO(how);
    std::vector<std::string> args = f.args();
    const bool term = std::string(how).rfind("SIGTERM", 0) == 0;
    if (term) {
      args.push_back("--on-sigterm");
      args.push_back("now");
    }
    tool_process job(args, f.dir.file(std::string("stop-") + (term ? "term" : "int") + ".log"));
    std::this_thread::sleep_for(700ms);
    REQUIRE(job.running());
    job.kill(term ? SIGTERM : SIGINT);
    const std::optional<int> code = job.wait(60s);
    INFO(job.log());
    REQUIRE(code.has_value());
    CHECK(*code == 130);
    CHECK(job.log().find("stopped (resumable)") != std::string::npos);
  }
  const tool_run rest = run_sluice(f.args());
  INFO(rest.out << rest.err);
  CHECK(rest.exit_code == 0);
  CHECK(published_lines(f.output) == published_lines(f.reference));
}
