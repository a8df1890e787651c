// Out of memory is a failure, never a crash (issue 33): a word count over a million distinct keys,
// across tcp channels with parallelism 4, under address-space limits (`ulimit -v`) from too small
// to start to almost enough. Each run either refuses at start (exit 2, "out of memory", naming the
// limit), fails while it runs (exit 1, naming the task, "out of memory" and the limit), or
// finishes (exit 0); never a signal. A failed run's rerun without the limit resumes and ends with
// exactly an unlimited run's output. (Before: a task's std::bad_alloc escaped the runner's scope
// past the job's teardown, and the runner was destroyed on executor 0 with tasks alive on the
// others: SIGABRT on a buffer pool's owner check, or SIGSEGV. On the epoll backend, one run in
// three died: a file thread's queue, the log writer and when_any's second child allocated where no
// handler could take a std::bad_alloc. Those paths no longer allocate, and what still reaches
// std::terminate exits 1 with "sluice: fatal: out of memory": memory_limit.hpp.) CI runs it on both
// backends.

#include "cluster_support.hpp"

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace sluice::test;

namespace {

// Between fork and exec: the address-space limit, in bytes (async-signal-safe).
bool limit_address_space(const void* context) noexcept {
  const rlim_t bytes = *static_cast<const rlim_t*>(context);
  const rlimit limit{bytes, bytes};
  return ::setrlimit(RLIMIT_AS, &limit) == 0;
}

// 100,000 lines of 10 keys each, nearly all distinct: a million keys (the run takes some 200 MiB).
void write_keys(const std::string& path) {
  std::ofstream out(path);
  std::mt19937_64 rng(7);
  char word[24];
  for (int line = 0; line < 100'000; ++line) {
    std::string text;
    for (int w = 0; w < 10; ++w) {
      std::snprintf(word, sizeof word, "%sk%llx", w == 0 ? "" : " ",
                    static_cast<unsigned long long>(rng() & ((std::uint64_t{1} << 40) - 1)));
      text += word;
    }
    out << text << '\n';
  }
}

// The test's environment with SLUICE_STALL_FATAL_MS=0: a snapshot of a million keys runs on its
// executor for 100-600 ms under load (issue 34 moves it off), past the suite's fatal 500 ms.
struct environment_without_fatal_stalls {
  std::vector<std::string> strings;
  std::vector<char*> pointers;
  environment_without_fatal_stalls() {
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("SLUICE_STALL_FATAL_MS=", 0) != 0) strings.emplace_back(*e);
    }
    strings.emplace_back("SLUICE_STALL_FATAL_MS=0");
    for (std::string& v : strings) pointers.push_back(v.data());
    pointers.push_back(nullptr);
  }
};

}  // namespace

TEST_CASE("a job out of memory fails naming the task or refuses at start, and the rerun resumes exactly") {
  temp_dir dir;
  const std::string input = dir.file("keys.txt");
  write_keys(input);
  const std::vector<std::string> job = {"wordcount", "--input",      input, "--transport", "tcp", "--parallelism",
                                        "4",         "--checkpoint-interval-ms", "500", "--quiet"};
  auto with = [&job](const std::string& out, const std::string& chk) {
    std::vector<std::string> a = job;
    a.insert(a.end(), {"--output", out, "--checkpoint-dir", chk});
    return a;
  };
  const environment_without_fatal_stalls env;
  const tool_setup no_fatal_stalls{.envp = env.pointers.data()};
  const tool_run reference = run_sluice(with(dir.file("reference"), dir.file("rchk")), no_fatal_stalls);
  REQUIRE(reference.exit_code == 0);
  const std::vector<std::string> expected = published_lines(dir.file("reference"));
  REQUIRE(expected.size() > 990'000);

  int failed_while_running = 0;
  int attempt = 0;
  // (Not monotonic: under a larger limit glibc makes more malloc arenas, 64 MiB of address space
  // each, so 300 MiB fails where 250 MiB finished.)
  for (const rlim_t mib : {120, 200, 300, 400}) {
    {
      const std::string out = dir.file("out" + std::to_string(attempt)), chk = dir.file("chk" + std::to_string(attempt));
      ++attempt;
      const rlim_t bytes = mib << 20;
      const tool_run r = run_sluice(
          with(out, chk), tool_setup{.before_exec = limit_address_space, .context = &bytes, .envp = env.pointers.data()});
      INFO("limit " << mib << " MiB: exit " << r.exit_code << ", signal " << r.signal << "\n" << r.out << r.err);
      REQUIRE(r.signal == 0);  // never a crash
      REQUIRE((r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2));
      if (r.exit_code == 0) {
        CHECK(published_lines(out) == expected);
        continue;
      }
      // The limit is named, and what ran out: memory, or the address space for a thread's stack.
      CHECK(r.err.find("ulimit -v") != std::string::npos);
      CHECK((r.err.find("out of memory") != std::string::npos || r.err.find("stack") != std::string::npos));
      if (r.exit_code == 2) continue;  // refused at start: nothing ran
      ++failed_while_running;
      // A task, named; or, where no task could take it, the runner's one fatal line.
      CHECK((r.err.find("task ") != std::string::npos || r.err.find("sluice: fatal:") != std::string::npos));
      const tool_run again = run_sluice(with(out, chk), no_fatal_stalls);
      INFO("the rerun: " << again.out << again.err);
      REQUIRE(again.exit_code == 0);
      CHECK(published_lines(out) == expected);
    }
  }
  // The limits span start-up and the state's growth: some run must have failed part-way.
  CHECK(failed_while_running > 0);
}
