#pragma once
// etcd_server: a real etcd (3.4) run by a test: its own data directory, client and peer URLs on
// Unix sockets (no ports), started and waited for until healthy, stopped (SIGTERM, then SIGKILL),
// killed, and restarted on the same data.
//
// How etcd 3.4 spells a Unix listener (tried against 3.4.23): "unix://NAME:PORT". Its URL check
// wants host:port and no path, and the socket file it creates is "NAME:PORT", relative to its
// working directory. So etcd runs with `dir` as its working directory, with
//   --listen-client-urls unix://<name>.client:0   (also --advertise-client-urls)
//   --listen-peer-urls   unix://<name>.peer:0     (also --initial-advertise-peer-urls)
//   --initial-cluster    <name>=unix://<name>.peer:0
// and clients reach it at "unix://<dir>/<name>.client:0" (etcd::endpoint::parse). The members of
// a cluster run in the same `dir` under their own names, each listing every member in
// `initial_cluster` (cluster_string), launched together and then waited for. etcd does not remove
// a stale client socket file (after a kill) and then fails with "bind: address already in use":
// launch() removes the old socket files first.
//
// TCP instead (etcd_server_options::tcp_host): client and peer URLs http://HOST:2379 and :2380,
// for an etcd alone in a network namespace of its own (options.netns, tests/support/netns.hpp),
// where fixed ports conflict with nothing. The child joins that namespace before exec, and the
// health probe runs on a thread of its own that joins it too (setns(2) moves only the calling
// thread).
//
// Elections are fast (heartbeat 10 ms, election timeout 100 ms), so a member is up in well under a
// second, and the shortest lease etcd grants is 1 s. etcd's output goes to <dir>/<name>.log, which
// start()'s errors quote. The child gets SIGKILL if the test process dies (PR_SET_PDEATHSIG).
//
// Blocking calls (fork, waitpid, a health probe over a plain socket): for the test's main thread,
// never for an executor's turn.
//
//   SLUICE_SKIP_WITHOUT_ETCD();
//   sluice::test::temp_dir dir;
//   sluice::test::etcd_server etcd(dir.path());
//   etcd.start();                       // throws with the log's tail when it does not come up
//   auto where = etcd::endpoint::parse(etcd.endpoint()).value();

#include "skip.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

struct etcd_server_options {
  std::string name = "n1";
  std::string initial_cluster;  // "" means this member alone; else cluster_string(names)
  std::string initial_cluster_state = "new";
  std::string tcp_host;  // "" = Unix sockets; else http://tcp_host:2379 (peers :2380)
  std::string netns;     // "" = this network namespace; else the one etcd runs in (by name)
};

// "n1=unix://n1.peer:0,n2=unix://n2.peer:0,...": --initial-cluster for members sharing a directory.
inline std::string cluster_string(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out.append(out.empty() ? "" : ",").append(n).append("=unix://").append(n).append(".peer:0");
  return out;
}

class etcd_server {
 public:
  // $SLUICE_ETCD when set, else `etcd` on PATH; "" when that is not an executable.
  static std::string binary() {
    if (const char* env = std::getenv("SLUICE_ETCD"); env != nullptr && *env != '\0') {
      return ::access(env, X_OK) == 0 ? std::string(env) : std::string();
    }
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
    for (std::string d; std::getline(dirs, d, ':');) {
      const std::string candidate = (d.empty() ? "." : d) + "/etcd";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return {};
  }
  static bool installed() { return !binary().empty(); }

  explicit etcd_server(std::string dir, etcd_server_options options = {}) : dir_(std::move(dir)), options_(std::move(options)) {}
  etcd_server(const etcd_server&) = delete;
  etcd_server& operator=(const etcd_server&) = delete;
  ~etcd_server() {
    try {
      stop();
    } catch (...) {
    }
  }

  const std::string& name() const noexcept { return options_.name; }
  std::string client_socket() const { return dir_ + "/" + options_.name + ".client:0"; }
  std::string peer_url() const {  // relative to dir
    return tcp() ? "http://" + options_.tcp_host + ":2380" : "unix://" + options_.name + ".peer:0";
  }
  std::string client_url() const {
    return tcp() ? "http://" + options_.tcp_host + ":2379" : "unix://" + options_.name + ".client:0";
  }
  // What etcd::endpoint::parse takes.
  std::string endpoint() const { return tcp() ? client_url() : "unix://" + client_socket(); }
  std::string data_dir() const { return dir_ + "/" + options_.name + ".data"; }
  std::string log_path() const { return dir_ + "/" + options_.name + ".log"; }
  bool running() const noexcept { return pid_ > 0; }
  pid_t pid() const noexcept { return pid_; }

  // Starts etcd (on the data directory as it is) and waits until it reports healthy.
  void start(std::chrono::milliseconds ready_within = std::chrono::seconds(20)) {
    launch();
    wait_until_healthy(ready_within);
  }

  // Starts etcd without waiting: the members of a new cluster are launched together, since none is
  // healthy before a quorum of them runs.
  void launch() {
    if (running()) throw std::logic_error("etcd_server::launch: already running");
    const std::string exe = binary();
    if (exe.empty()) throw std::runtime_error("etcd is not installed");
    std::error_code ignored;
    std::filesystem::remove(client_socket(), ignored);
    std::filesystem::remove(dir_ + "/" + options_.name + ".peer:0", ignored);
    const std::string client_url = this->client_url();
    const std::string cluster =
        options_.initial_cluster.empty() ? options_.name + "=" + peer_url() : options_.initial_cluster;
    const std::vector<std::string> args = {
        exe,
        "--name", options_.name,
        "--data-dir", data_dir(),
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url(),
        "--initial-advertise-peer-urls", peer_url(),
        "--initial-cluster", cluster,
        "--initial-cluster-state", options_.initial_cluster_state,
        "--heartbeat-interval", "10",
        "--election-timeout", "100",
        "--logger", "zap",
        "--log-outputs", "stderr",
    };
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const std::string log = log_path();
    const pid_t parent = ::getpid();
    const int nsfd = options_.netns.empty() ? -1 : ::open(("/var/run/netns/" + options_.netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (!options_.netns.empty() && nsfd < 0) throw std::runtime_error("etcd: no network namespace " + options_.netns);
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork for etcd: " + std::string(std::strerror(errno)));
    if (child == 0) {  // only async-signal-safe calls until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      if (nsfd >= 0 && ::setns(nsfd, CLONE_NEWNET) != 0) ::_exit(125);
      if (::chdir(dir_.c_str()) != 0) ::_exit(126);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    if (nsfd >= 0) ::close(nsfd);
    pid_ = child;
  }

  // Waits until etcd reports healthy (it has a leader); throws with the log's tail otherwise.
  void wait_until_healthy(std::chrono::milliseconds ready_within = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + ready_within;
    while (!healthy()) {
      int status = 0;
      if (!running() || ::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("etcd exited while starting (status " + std::to_string(status) + "); log:\n" + log_tail());
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill();
        throw std::runtime_error("etcd not healthy after " + std::to_string(ready_within.count()) + " ms; log:\n" + log_tail());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // SIGTERM, then SIGKILL if it has not exited after `grace`. A no-op when not running.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5)) {
    if (!running()) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill();
  }

  // SIGKILL: a crash.
  void kill() {
    if (!running()) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  void restart() {
    stop();
    start();
  }

  // GET /health over a plain blocking socket (1 s at most): true when etcd answers "true".
  bool healthy() const {
    if (!options_.netns.empty()) {  // probed from a thread inside etcd's namespace
      bool answer = false;
      std::thread probe([this, &answer] {
        const int nsfd = ::open(("/var/run/netns/" + options_.netns).c_str(), O_RDONLY | O_CLOEXEC);
        if (nsfd < 0) return;
        if (::setns(nsfd, CLONE_NEWNET) == 0) answer = probe_health();
        ::close(nsfd);
      });
      probe.join();
      return answer;
    }
    return probe_health();
  }

  // The last lines of etcd's log.
  std::string log_tail(std::size_t max_bytes = 3000) const {
    std::ifstream in(log_path());
    std::stringstream all;
    all << in.rdbuf();
    const std::string s = all.str();
    return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
  }

 private:
  bool tcp() const noexcept { return !options_.tcp_host.empty(); }

  // One GET /health in the calling thread's network namespace.
  bool probe_health() const {
    int fd = -1;
    sockaddr_storage where{};
    socklen_t where_len = 0;
    if (tcp()) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      auto* sin = reinterpret_cast<sockaddr_in*>(&where);
      sin->sin_family = AF_INET;
      sin->sin_port = htons(2379);
      if (::inet_pton(AF_INET, options_.tcp_host.c_str(), &sin->sin_addr) != 1) {
        if (fd >= 0) ::close(fd);
        return false;
      }
      where_len = sizeof(sockaddr_in);
    } else {
      fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      auto* sun = reinterpret_cast<sockaddr_un*>(&where);
      sun->sun_family = AF_UNIX;
      const std::string path = client_socket();
      std::strncpy(sun->sun_path, path.c_str(), sizeof sun->sun_path - 1);
      where_len = sizeof(sockaddr_un);
    }
    if (fd < 0) return false;
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string reply;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&where), where_len) == 0) {
      const char request[] = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
      if (::send(fd, request, sizeof request - 1, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof request - 1)) {
        char buf[1024];
        for (ssize_t n; reply.size() < 65536 && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<std::size_t>(n));
      }
    }
    ::close(fd);
    return reply.find("\"health\":\"true\"") != std::string::npos;
  }

  std::string dir_;
  etcd_server_options options_;
  pid_t pid_ = -1;
};

}  // namespace sluice::test

// Ends the test case, reported by ctest as skipped (tests/CMakeLists.txt), when etcd is missing.
#define SLUICE_SKIP_WITHOUT_ETCD() SLUICE_SKIP_UNLESS(::sluice::test::etcd_server::installed(), "etcd is not installed (apt-get install etcd-server, or set SLUICE_ETCD)")
