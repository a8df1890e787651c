#pragma once
// run_sluice: runs the built `sluice` tool (SLUICE_TOOL_PATH, from tests/CMakeLists.txt) with
// arguments and returns its exit code, stdout and stderr.
//
//   tool_run r = run_sluice({"corpus", "--lines", "-1", "--output", dir.file("c.txt")});
//   CHECK(r.exit_code == 2);
//
// The child may write files of at most 64 MiB (RLIMIT_FSIZE) and gets 60 s: a regression that
// writes without end (`corpus --lines 2^64-1`) fails the test with a signal instead of filling
// the disk or stalling the suite.

#include <support/temp_dir.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#ifndef SLUICE_TOOL_PATH
#error "SLUICE_TOOL_PATH must name the sluice executable (tests/CMakeLists.txt defines it)"
#endif

namespace sluice::test {

struct tool_run {
  int exit_code = -1;  // -1 when the tool did not exit normally (see signal)
  int signal = 0;      // the signal that ended it, or 0
  std::string out;
  std::string err;
};

// The lines of `text`, without their '\n'.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What the child does between fork and exec (async-signal-safe calls only): `before_exec(context)`
// when set (it returns false to fail the run with exit code 127), and `envp` as the environment
// when set (else the test's own).
struct tool_setup {
  bool (*before_exec)(const void* context) noexcept = nullptr;
  const void* context = nullptr;
  char* const* envp = nullptr;
};

// Runs `sluice args...`; its stdout and stderr go through files in a temporary directory of their own.
inline tool_run run_sluice(std::vector<std::string> args, const tool_setup& setup = {}) {
  const temp_dir scratch;
  constexpr rlim_t max_file_bytes = rlim_t{64} << 20;
  constexpr auto deadline = std::chrono::seconds(60);
  const std::string out_path = scratch.file("stdout");
  const std::string err_path = scratch.file("stderr");
  std::vector<char*> argv;
  std::string tool = SLUICE_TOOL_PATH;
  argv.push_back(tool.data());
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {  // only async-signal-safe calls until exec
    const rlimit fsize{max_file_bytes, max_file_bytes};
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0 || ::setrlimit(RLIMIT_FSIZE, &fsize) != 0) {
      ::_exit(127);
    }
    if (setup.before_exec != nullptr && !setup.before_exec(setup.context)) ::_exit(127);
    if (setup.envp != nullptr) {
      ::execve(argv[0], argv.data(), setup.envp);
    } else {
      ::execv(argv[0], argv.data());
    }
    ::_exit(127);
  }

  int status = 0;
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "waitpid");
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  tool_run r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_whole_file(out_path);
  r.err = read_whole_file(err_path);
  return r;
}

}  // namespace sluice::test
