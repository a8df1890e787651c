#pragma once
// open_fd_count: how many descriptors this process has open (entries of /proc/self/fd), to prove
// that an operation leaks none. Compare two counts taken the same way; the directory stream's own
// descriptor is excluded.

#include <dirent.h>

#include <cstdlib>
#include <string_view>

namespace sluice::test {

inline int open_fd_count() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) std::abort();
  const int own = ::dirfd(dir);
  int count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == ".." || std::atoi(entry->d_name) == own) continue;
    ++count;
  }
  ::closedir(dir);
  return count;
}

}  // namespace sluice::test
