// read_secret_file (see secret_file.hpp).
#include <sluice/buffers/secret_file.hpp>
#include <sluice/runtime/system.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

namespace sluice::buffers {

namespace {
io::error refused(const std::string& path, std::string why, std::errc code = std::errc::permission_denied) {
  return io::error(std::make_error_code(code), fmt::format("secret file '{}': {}", path, why));
}
}  // namespace

io::result<std::vector<std::byte>> read_secret_file(const std::string& path) {
  runtime::system& sys = runtime::sys();
  const int fd = sys.open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    const int e = -fd;
    return io::error(std::error_code(e, std::system_category()),
                     fmt::format("open secret file '{}': {}", path, std::generic_category().message(e)));
  }
  struct closer {
    runtime::system* sys;
    int fd;
    ~closer() { sys->close(fd); }
  } guard{&sys, fd};
  struct stat st {};
  if (const int r = sys.fstat(fd, &st); r != 0) {
    const int e = -r;
    return io::error(std::error_code(e, std::system_category()),
                     fmt::format("stat secret file '{}': {}", path, std::generic_category().message(e)));
  }
  if (!S_ISREG(st.st_mode)) return refused(path, "not a regular file", std::errc::invalid_argument);
  if ((st.st_mode & 077) != 0) {
    return refused(path, fmt::format("mode {:04o} lets the group or others at it; only its owner may (chmod 600 it)",
                                     static_cast<unsigned>(st.st_mode & 07777)));
  }
  if (st.st_size == 0) return refused(path, "empty", std::errc::invalid_argument);
  if (static_cast<std::size_t>(st.st_size) > max_secret_bytes) {
    return refused(path, fmt::format("{} bytes; a secret has at most {}", st.st_size, max_secret_bytes),
                   std::errc::file_too_large);
  }
  std::vector<std::byte> secret(static_cast<std::size_t>(st.st_size));
  std::size_t have = 0;
  while (have < secret.size()) {
    const ssize_t n = sys.pread(fd, secret.data() + have, secret.size() - have, static_cast<off_t>(have));
    if (n == -EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? static_cast<int>(-n) : EIO;
      return io::error(std::error_code(e, std::system_category()),
                       fmt::format("read secret file '{}': {}", path,
                                   n < 0 ? std::generic_category().message(e) : std::string("it shrank while read")));
    }
    have += static_cast<std::size_t>(n);
  }
  return secret;
}

}  // namespace sluice::buffers
