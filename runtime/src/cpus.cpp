#include <sluice/runtime/cpus.hpp>

#include <sched.h>

#include <algorithm>
#include <thread>

namespace sluice::runtime {

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) {
    const unsigned all = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned c = 0; c < all; ++c) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

unsigned available_cpus() { return static_cast<unsigned>(allowed_cpus().size()); }

}  // namespace sluice::runtime
