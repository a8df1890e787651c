#pragma once
// nats_server: a real nats-server (2.9, Debian 12) with JetStream, run by a test:
//   nats-server -js -sd <dir>/js -a 127.0.0.1 -p <port> -l <dir>/nats.log
// The port is chosen by binding port 0 and releasing it just before the exec (a tiny window in
// which another process could take it; start() then fails with the log's tail and says so). Ready
// once a plain socket reads the server's INFO line. The child gets SIGKILL if the test process dies
// (PR_SET_PDEATHSIG). Blocking calls: for the test's main thread, never an executor's turn.
//
//   SLUICE_SKIP_WITHOUT_NATS();
//   sluice::test::temp_dir dir;
//   sluice::test::nats_server nats(dir.path());
//   nats.start();
//   auto where = sluice::io::address::loopback_v4(nats.port());

#include "skip.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

class nats_server {
 public:
  static std::string binary() {
    if (const char* env = std::getenv("SLUICE_NATS_SERVER"); env != nullptr && *env != '\0') {
      return ::access(env, X_OK) == 0 ? std::string(env) : std::string();
    }
    for (const char* c : {"/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"}) {
      if (::access(c, X_OK) == 0) return c;
    }
    return {};
  }
  static bool installed() { return !binary().empty(); }

  explicit nats_server(std::string dir) : dir_(std::move(dir)) {}
  nats_server(const nats_server&) = delete;
  nats_server& operator=(const nats_server&) = delete;
  ~nats_server() { kill(); }

  std::uint16_t port() const noexcept { return port_; }
  std::string log_path() const { return dir_ + "/nats.log"; }
  bool running() const noexcept { return pid_ > 0; }

  // Starts (on the same store directory and port as before, after a stop) and waits for INFO.
  void start(std::chrono::milliseconds ready_within = std::chrono::seconds(10)) {
    if (running()) throw std::logic_error("nats_server::start: already running");
    if (port_ == 0) port_ = free_port();
    const std::string exe = binary();
    if (exe.empty()) throw std::runtime_error("nats-server is not installed");
    const std::vector<std::string> args = {exe, "-js", "-sd", dir_ + "/js", "-a", "127.0.0.1", "-p", std::to_string(port_),
                                           "-l", log_path()};
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork for nats-server: " + std::string(std::strerror(errno)));
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    pid_ = child;
    const auto deadline = std::chrono::steady_clock::now() + ready_within;
    while (!answers()) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("nats-server exited while starting (status " + std::to_string(status) + "); log:\n" + log_tail());
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill();
        throw std::runtime_error("nats-server not ready; log:\n" + log_tail());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void kill() {
    if (!running()) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string log_tail(std::size_t max_bytes = 3000) const {
    std::ifstream in(log_path());
    std::stringstream all;
    all << in.rdbuf();
    const std::string s = all.str();
    return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
  }

 private:
  static std::uint16_t free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("no free port for nats-server");
    }
    ::close(fd);
    return ntohs(a.sin_port);
  }

  bool answers() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      char buf[8] = {};
      ok = ::recv(fd, buf, 4, MSG_WAITALL) == 4 && std::memcmp(buf, "INFO", 4) == 0;
    }
    ::close(fd);
    return ok;
  }

  std::string dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace sluice::test

#define SLUICE_SKIP_WITHOUT_NATS() SLUICE_SKIP_UNLESS(::sluice::test::nats_server::installed(), "nats-server is not installed (apt-get install nats-server, or set SLUICE_NATS_SERVER)")
