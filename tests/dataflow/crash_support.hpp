#pragma once
// What the crash tests share: a job in a child process, killed with SIGKILL at random moments and
// started again with the same arguments until one run finishes.

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

// Runs `job` (returns an exit code) in a child process; returns its pid. The child never returns
// into the test; an exception there exits 3.
inline pid_t start_child(const std::function<int()>& job) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 1;
  try {
    code = job();
  } catch (...) {
    code = 3;
  }
  ::_exit(code);
}

struct crash_report {
  int kills = 0;
  int exit_code = -1;
};

// Starts `job` again and again, killing it `kills` times at random moments (seeded), then lets one
// run finish. A run that finishes before the first kill (a fast build) starts over from nothing
// (`reset` removes the job's directories), killing sooner.
inline crash_report run_until_done(const std::function<int()>& job, const std::function<void()>& reset,
                                   std::uint64_t seed, int kills = 8, int max_delay_ms = 250) {
  std::mt19937_64 rng(seed);
  crash_report report;
  for (int attempt = 0; attempt < 5 * kills + 8; ++attempt) {
    const pid_t pid = start_child(job);
    REQUIRE(pid > 0);
    const bool kill_it = report.kills < kills;
    const auto delay = std::chrono::milliseconds(std::uniform_int_distribution<int>(1, max_delay_ms)(rng));
    const auto deadline = std::chrono::steady_clock::now() + (kill_it ? delay : std::chrono::milliseconds(120'000));
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (done == pid && kill_it && report.kills == 0) {
      reset();
      max_delay_ms = std::max(2, max_delay_ms / 2);
      continue;
    }
    if (done == pid) {
      report.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return report;
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    ++report.kills;
  }
  return report;
}

// Runs `job` in a child until a committed checkpoint under `chk_root` holds channel state, kills it
// there and removes every newer checkpoint directory, so a restart must resume from that one.
// Returns its directory (empty if none came in `attempts` runs; `reset` starts each over).
inline std::filesystem::path kill_at_channel_state(const std::function<int()>& job, const std::filesystem::path& chk_root,
                                                   const std::function<void()>& reset, int attempts = 20) {
  std::filesystem::path with_state;
  for (int attempt = 0; attempt < attempts && with_state.empty(); ++attempt) {
    const pid_t pid = start_child(job);
    int status = 0;
    while (with_state.empty() && ::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::filesystem::exists(chk_root)) {
        for (const auto& e : std::filesystem::directory_iterator(chk_root)) {
          if (manifest_channel_bytes(e.path()) > 0) with_state = e.path();
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!with_state.empty()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    } else {
      reset();  // it finished without one: start over from nothing
    }
  }
  if (with_state.empty()) return with_state;
  const std::string keep = with_state.filename().string();
  for (const auto& e : std::filesystem::directory_iterator(chk_root)) {
    const std::string name = e.path().filename().string();
    if (name.size() > keep.size() || (name.size() == keep.size() && name > keep)) std::filesystem::remove_all(e.path());
  }
  return with_state;
}

}  // namespace sluice::test
