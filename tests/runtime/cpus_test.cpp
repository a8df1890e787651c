// Default executor counts follow the CPUs the process may run on (its affinity mask, as taskset and
// a cgroup cpuset set it), not the machine's: `taskset -c 0 sluice ...` starts one executor.
#include <sluice/runtime/cpus.hpp>
#include <sluice/runtime/engine.hpp>

#include <support/death.hpp>

#include <catch2/catch.hpp>

#include <sched.h>
#include <unistd.h>

#include <thread>

namespace rt = sluice::runtime;

TEST_CASE("allowed_cpus is the affinity mask and an engine of 0 executors starts one per CPU in it") {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(::sched_getaffinity(0, sizeof mine, &mine) == 0);
  CHECK(rt::available_cpus() == static_cast<unsigned>(CPU_COUNT(&mine)));
  const std::vector<int> cpus = rt::allowed_cpus();
  REQUIRE(!cpus.empty());
  for (int c : cpus) CHECK(CPU_ISSET(c, &mine));

  // In a child restricted to one CPU (the last allowed, so not always CPU 0): one CPU, one executor.
  const int only = cpus.back();
  const auto end = sluice::test::run_in_child([only] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(only, &one);
    if (::sched_setaffinity(0, sizeof one, &one) != 0) ::_exit(3);
    if (rt::available_cpus() != 1 || rt::allowed_cpus() != std::vector<int>{only}) ::_exit(4);
    rt::engine eng({.executors = 0, .pin_cpus = true});
    if (eng.size() != 1) ::_exit(5);
  });
  INFO(end.stderr_text);
  CHECK(end.exit_code == 0);
  CHECK(end.stderr_text.find("cannot pin") == std::string::npos);  // pinned inside the mask
}
