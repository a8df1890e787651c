#pragma once
// raise_fd_limit: for tests that hold thousands of connections. Raises RLIMIT_NOFILE's soft limit
// to the hard one if `needed` fds do not fit; returns "" when they fit, else why not (a test then
// skips with that reason).

#include <sys/resource.h>

#include <cstddef>
#include <string>

namespace sluice::test {

inline std::string raise_fd_limit(std::size_t needed) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return "getrlimit failed";
  if (lim.rlim_cur < needed && lim.rlim_max >= needed) {
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return "setrlimit failed";
  }
  if (lim.rlim_cur < needed) {
    return "RLIMIT_NOFILE is " + std::to_string(lim.rlim_cur) + " (hard " + std::to_string(lim.rlim_max) + "), " +
           std::to_string(needed) + " needed";
  }
  return {};
}

}  // namespace sluice::test
