#include <sluice/runtime/memory_limit.hpp>

#include <fmt/core.h>

#include <sys/resource.h>

namespace sluice::runtime {

std::string address_space_note() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::string();
  return fmt::format("; the address space is limited to {} MiB (ulimit -v)", limit.rlim_cur >> 20);
}

}  // namespace sluice::runtime
