// The blocking helpers of fs.hpp: start-up metadata calls, each through the thread's runtime::sys().

#include <sluice/io/fs.hpp>

#include <sluice/runtime/system.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <vector>

namespace sluice::io {

namespace {

// A path deeper than this is refused (std::filesystem::create_directories has the same bound).
constexpr std::size_t max_path_depth = 1000;

// The file read in this many bytes at a time.
constexpr std::size_t read_chunk_bytes = 64 * 1024;

std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string_view last_component(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// "a/b" -> "a", "/a" -> "/", "a" -> "" (the working directory: nothing to make), "/" -> "".
std::string parent_of(const std::string& path) {
  if (path == "/") return {};
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {};
  if (slash == 0) return "/";
  return without_trailing_slashes(path.substr(0, slash));
}

bool is_not_found(int rc) noexcept { return rc == -ENOENT || rc == -ENOTDIR; }

}  // namespace

io::result<std::vector<std::string>> list_directory_blocking(const std::string& dir) {
  std::vector<std::string> names;
  const int rc = runtime::sys().list_directory(dir.c_str(), names, max_directory_entries);
  if (rc == -EFBIG) {
    return io::error(std::make_error_code(std::errc::file_too_large),
                     "list directory '" + dir + "': more than " + std::to_string(max_directory_entries) + " entries");
  }
  if (rc < 0) return io::error::from_errno(-rc, "list directory '" + dir + "'");
  return names;
}

int make_directories_blocking(const std::string& path) {
  if (path.empty()) return -EINVAL;
  runtime::system& os = runtime::sys();
  // Walk up to the first component that exists, remembering the missing ones (innermost first).
  std::vector<std::string> missing;
  std::string at = without_trailing_slashes(path);
  for (bool first = true; !at.empty(); first = false) {
    struct stat st {};
    const int rc = os.stat(at.c_str(), &st);
    if (rc == 0) {
      if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
      break;
    }
    if (!is_not_found(rc)) {
      if (first) return rc;
      break;  // a parent we cannot look at: mkdir below reports why
    }
    const std::string_view name = last_component(at);
    if (name != "." && name != "..") {
      if (missing.size() == max_path_depth) return -ENAMETOOLONG;
      missing.push_back(at);
    }
    at = parent_of(at);
  }
  // Make them, outermost first; one made meanwhile by someone else is fine if it is a directory.
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    const int rc = os.mkdir(it->c_str(), 0777);
    if (rc == -EEXIST && is_directory_blocking(*it)) continue;
    if (rc < 0) return rc;
  }
  // A new directory's name is durable only once its parent is fsynced: without this a crash soon
  // after start-up could take a checkpoint root away with every checkpoint in it. The path's own
  // parent is synced even if nothing was made here: an earlier run may have made it and died first.
  std::vector<std::string> parents;
  for (const std::string& made : missing) parents.push_back(parent_of(made));
  if (missing.empty()) parents.push_back(parent_of(without_trailing_slashes(path)));
  for (const std::string& parent : parents) {
    if (const int rc = fsync_directory_blocking(parent.empty() ? std::string(".") : parent); rc < 0) return rc;
  }
  return 0;
}

int fsync_directory_blocking(const std::string& dir) {
  runtime::system& os = runtime::sys();
  const int fd = os.open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return fd;
  const int synced = os.fsync(fd);
  const int closed = os.close(fd);
  return synced < 0 ? synced : closed;
}

bool is_directory_blocking(const std::string& path) {
  struct stat st {};
  return runtime::sys().stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::optional<std::string> dangling_symlink_blocking(const std::string& path) {
  runtime::system& os = runtime::sys();
  // Each prefix of `path`, outermost first: the first dangling link is the cause.
  std::string at = without_trailing_slashes(path);
  std::vector<std::string> prefixes;
  for (; !at.empty() && prefixes.size() < max_path_depth; at = parent_of(at)) prefixes.push_back(at);
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it) {
    struct stat st {};
    if (os.lstat(it->c_str(), &st) != 0) return std::nullopt;  // missing: nothing beyond it exists
    if (!S_ISLNK(st.st_mode)) continue;
    if (os.stat(it->c_str(), &st) != -ENOENT) continue;  // a link to something that exists
    std::string target;
    if (os.readlink(it->c_str(), target) != 0) return fmt::format("'{}' is a dangling symbolic link", *it);
    return fmt::format("'{}' is a dangling symbolic link to '{}'", *it, target);
  }
  return std::nullopt;
}

int read_file_blocking(const std::string& path, std::string& text, std::size_t max_bytes) {
  runtime::system& os = runtime::sys();
  const int fd = os.open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
  if (fd < 0) return fd;
  std::string content;
  int rc = 0;
  for (;;) {  // bound: each pass reads > 0 bytes, ends, or passes max_bytes
    const std::size_t at = content.size();
    if (at > max_bytes) {
      rc = -EFBIG;
      break;
    }
    content.resize(at + read_chunk_bytes);
    const ssize_t n = os.pread(fd, content.data() + at, read_chunk_bytes, static_cast<off_t>(at));
    content.resize(at + static_cast<std::size_t>(n > 0 ? n : 0));
    if (n == -EINTR) continue;
    if (n < 0) rc = static_cast<int>(n);
    if (n <= 0) break;
  }
  (void)os.close(fd);
  if (rc == 0) text = std::move(content);
  return rc;
}

int write_all_blocking(int fd, std::string_view text, std::uint64_t offset) {
  runtime::system& os = runtime::sys();
  std::size_t done = 0;
  while (done < text.size()) {  // bound: each pass writes > 0 bytes or ends
    const ssize_t n = os.pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(offset + done));
    if (n == -EINTR) continue;
    if (n < 0) return static_cast<int>(n);
    if (n == 0) return -EIO;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

std::string absolute_path(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  std::string dir = runtime::sys().current_directory();
  if (dir.empty() || dir.back() != '/') dir += '/';
  return dir + path;
}

}  // namespace sluice::io
