#pragma once
// The CPUs this process may run on: its affinity mask (sched_getaffinity), which `taskset`, a
// cgroup cpuset (containers, systemd's AllowedCPUs=) and numactl set. Default executor counts
// follow it, not the machine's CPU count: `taskset -c 0 sluice ...` starts one executor.

#include <vector>

namespace sluice::runtime {

// The CPU numbers of the affinity mask, ascending; every CPU the kernel reports when the mask
// cannot be read.
std::vector<int> allowed_cpus();

// How many CPUs the process may run on (at least 1).
unsigned available_cpus();

}  // namespace sluice::runtime
