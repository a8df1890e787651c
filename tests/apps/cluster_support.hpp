#pragma once
// cluster_support: the pieces of a job across worker processes, for tests: a worker process of the
// built `sluice` tool (started, killed, waited for), free loopback ports, and the published output
// of a directory, sorted.

#include "run_sluice.hpp"

#include <support/free_port.hpp>
#include <support/temp_dir.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {


// One `sluice ...` process, its output in <log>; killed (SIGKILL) if still running when destroyed.
// With `netns`, it runs inside that network namespace (by name, tests/support/netns.hpp), joined by
// setns(2) in the child before exec; `env` entries ("NAME=value") are added to its environment.
class tool_process {
 public:
  tool_process(std::vector<std::string> args, std::string log, std::string netns = {}, std::vector<std::string> env = {})
      : log_(std::move(log)) {
    std::vector<char*> argv;
    std::string tool = SLUICE_TOOL_PATH;
    argv.push_back(tool.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;  // built before fork: the child only switches and execs
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int nsfd = netns.empty() ? -1 : ::open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (!netns.empty() && nsfd < 0) throw std::runtime_error("tool_process: no network namespace " + netns);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (nsfd >= 0 && ::setns(nsfd, CLONE_NEWNET) != 0) ::_exit(125);
      const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (out < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) ::_exit(127);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    if (nsfd >= 0) ::close(nsfd);
  }
  tool_process(const tool_process&) = delete;
  tool_process& operator=(const tool_process&) = delete;
  ~tool_process() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      (void)::waitpid(pid_, &status, 0);
    }
  }
  void kill(int sig = SIGKILL) const { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  bool running() { return !wait(std::chrono::milliseconds(0)).has_value(); }
  // The exit code (-signal when a signal ended it), or nullopt if still running after `within`.
  std::optional<int> wait(std::chrono::milliseconds within) {
    if (exit_code_) return exit_code_;
    const auto give_up = std::chrono::steady_clock::now() + within;
    for (;;) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        return exit_code_;
      }
      if (std::chrono::steady_clock::now() > give_up) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string log() const { return read_whole_file(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// The newest checkpoint under `dir` whose manifest is written (chk-<id>/_manifest, not empty); 0 if
// none. Old checkpoints are removed as new ones complete, so ids, not directories, are counted.
// Written is not committed: the bytes land before their fsync, and a commit that fails or is
// cancelled takes its manifest back (with one checkpoint in flight, id N seen means N-1 committed).
inline std::uint64_t newest_checkpoint(const std::string& dir) {
  std::uint64_t newest = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("chk-", 0) != 0 || name.find_first_not_of("0123456789", 4) != std::string::npos) continue;
    std::error_code size_ec;
    const auto bytes = std::filesystem::file_size(it->path() / "_manifest", size_ec);
    if (size_ec || bytes == 0) continue;
    newest = std::max<std::uint64_t>(newest, std::stoull(name.substr(4)));
  }
  return newest;
}

// Polls `done` every 20 ms until it holds or `within` passes; whether it held.
template <typename F>
bool poll_until(F done, std::chrono::milliseconds within) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Every line of the files published under `dir` (part-*), sorted: the job's output as a set.
inline std::vector<std::string> published_lines(const std::string& dir) {
  std::vector<std::string> lines;
  if (!std::filesystem::exists(dir)) return lines;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("part-", 0) != 0) continue;
    std::istringstream in(read_whole_file(e.path().string()));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

}  // namespace sluice::test
