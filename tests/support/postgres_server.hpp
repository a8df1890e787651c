#pragma once
// postgres_server: a real PostgreSQL 15 run by a test, as etcd_server.hpp runs etcd. Binaries in
// /usr/lib/postgresql/15/bin (or $SLUICE_PG_BIN). PostgreSQL refuses to run as root, so initdb and
// postgres run as the `postgres` user (fork, setgid/setuid from getpwnam, PR_SET_PDEATHSIG, exec)
// in `dir`, which is chowned to it. The server listens only on a Unix socket in `dir`
// (listen_addresses='', unix_socket_directories=dir; the port only names the socket file), with
// fsync=off for speed (a crash of the server, not of the machine, loses nothing committed:
// synchronous_commit stays on), plus `settings` ("name=value", each as -c). Its output goes to
// <dir>/postgres.log, quoted by start()'s errors.
// conninfo() is "host=<dir> port=<port> dbname=postgres user=postgres"; url() the URI form.
//
// Blocking calls (fork, waitpid, a blocking libpq probe): for the test's main thread only.
//
//   SLUICE_SKIP_WITHOUT_POSTGRES();
//   sluice::test::temp_dir dir;
//   sluice::test::postgres_server pg(dir.path());
//   pg.start();   // initdb on first start; throws with the log's tail when it does not come up

#include "skip.hpp"

#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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

class postgres_server {
 public:
  static std::string bin_dir() {
    const char* env = std::getenv("SLUICE_PG_BIN");
    return env != nullptr ? env : "/usr/lib/postgresql/15/bin";
  }
  static bool installed() {
    return ::access((bin_dir() + "/postgres").c_str(), X_OK) == 0 && ::access((bin_dir() + "/initdb").c_str(), X_OK) == 0 &&
           ::getpwnam("postgres") != nullptr;
  }

  explicit postgres_server(std::string dir, int port = 5432) : dir_(std::move(dir)), port_(port) {}
  postgres_server(const postgres_server&) = delete;
  postgres_server& operator=(const postgres_server&) = delete;
  ~postgres_server() { stop(); }

  std::string conninfo() const { return "host=" + dir_ + " port=" + std::to_string(port_) + " dbname=postgres user=postgres"; }
  std::string url(const std::string& table) const {
    return "postgresql://postgres@/postgres?host=" + dir_ + "&port=" + std::to_string(port_) + "&table=" + table;
  }
  const std::string& dir() const noexcept { return dir_; }
  // Server settings for the next start(), "name=value" each.
  std::vector<std::string> settings;

  void start() {
    const passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr) throw std::runtime_error("postgres_server: no `postgres` user");
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
    if (::chown(dir_.c_str(), uid_, gid_) != 0) throw std::runtime_error("chown " + dir_ + ": " + std::strerror(errno));
    const std::string data = dir_ + "/data";
    if (!std::filesystem::exists(data)) {
      const pid_t p = launch({bin_dir() + "/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"});
      int status = 0;
      ::waitpid(p, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("initdb failed: " + log_tail());
    }
    pid_ = launch({bin_dir() + "/postgres", "-D", data, "-k", dir_, "-p", std::to_string(port_), "-c", "listen_addresses=",
                   "-c", "fsync=off", "-c", "full_page_writes=off"}, settings);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      PGconn* c = PQconnectdb(conninfo().c_str());
      const bool ok = PQstatus(c) == CONNECTION_OK;
      PQfinish(c);
      if (ok) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("postgres exited at start: " + log_tail());
      }
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("postgres did not come up: " + log_tail());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Fast shutdown (SIGINT), then SIGKILL after 10 s.
  void stop() { end(SIGINT); }
  void kill() { end(SIGKILL); }
  // Immediate shutdown (SIGQUIT): the postmaster and every backend exit at once, as in a crash;
  // the next start() recovers from the WAL.
  void crash() { end(SIGQUIT); }

  std::string log_tail() const {
    std::ifstream in(dir_ + "/postgres.log");
    std::stringstream s;
    s << in.rdbuf();
    std::string all = s.str();
    return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
  }

 private:
  void end(int sig) {
    if (pid_ < 0) return;
    ::kill(pid_, sig);
    int status = 0;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  pid_t launch(std::vector<std::string> args, const std::vector<std::string>& more = {}) {
    for (const std::string& m : more) {
      args.push_back("-c");
      args.push_back(m);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = dir_ + "/postgres.log";
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out < 0) throw std::runtime_error("open " + log + ": " + std::strerror(errno));
    (void)::fchown(out, uid_, gid_);
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork for postgres: " + std::string(std::strerror(errno)));
    if (child == 0) {  // only async-signal-safe calls until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(out, 1);
      ::dup2(out, 2);
      if (::setgid(gid_) != 0 || ::setuid(uid_) != 0) ::_exit(126);
      if (::chdir(dir_.c_str()) != 0) ::_exit(125);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out);
    return child;
  }

  std::string dir_;
  int port_;
  pid_t pid_ = -1;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
};

}  // namespace sluice::test

#define SLUICE_SKIP_WITHOUT_POSTGRES() SLUICE_SKIP_UNLESS(::sluice::test::postgres_server::installed(), "PostgreSQL 15 is not installed (apt-get install postgresql-15)")
