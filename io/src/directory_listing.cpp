#include <sluice/io/fs.hpp>

#include <dirent.h>

#include <cerrno>
#include <cstring>

namespace sluice::io {

io::result<std::vector<std::string>> list_directory_blocking(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return io::error::from_errno(errno, "list directory '" + dir + "'");
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (entry == nullptr) break;
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (names.size() == max_directory_entries) {
      ::closedir(d);
      return io::error(std::make_error_code(std::errc::file_too_large),
                       "list directory '" + dir + "': more than " + std::to_string(max_directory_entries) + " entries");
    }
    names.emplace_back(name);
  }
  const int read_errno = errno;
  ::closedir(d);
  if (read_errno != 0) return io::error::from_errno(read_errno, "list directory '" + dir + "'");
  return names;
}

}  // namespace sluice::io
