#pragma once
// run_in_child: runs `body` in a forked child with its stderr captured, and reports how the child
// ended. For checks that must abort the process (SLUICE_ASSERT): the test itself survives.
// The child never returns into Catch2: it ends with _exit(0) if `body` returns.

#include <sluice/runtime/log.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <utility>

namespace sluice::test {

struct child_end {
  bool aborted = false;  // ended by SIGABRT
  int exit_code = -1;    // when it exited instead
  std::string stderr_text;
};

template <class Body>
child_end run_in_child(Body body) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[1]);
    // Catch2's handler would report and re-raise from inside the signal; under ThreadSanitizer
    // that raise is itself reported (exit 66), not an abort. The child dies by SIGABRT directly.
    ::signal(SIGABRT, SIG_DFL);
    body();
    sluice::runtime::log::flush();  // _exit would lose what an executor queued
    ::_exit(0);
  }
  ::close(fds[1]);
  child_end end;
  char chunk[512];
  for (;;) {
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n <= 0) break;
    end.stderr_text.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (WIFSIGNALED(status)) end.aborted = WTERMSIG(status) == SIGABRT;
  if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  return end;
}

}  // namespace sluice::test
