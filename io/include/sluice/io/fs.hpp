#pragma once
// Directory-entry operations through the ring: make a directory, remove a file, remove an empty
// directory. Each is one io_uring operation (mkdirat / unlinkat), so none blocks the executor.
// Errors name the operation and the path: "mkdir '/data/chk-7': File exists".
//
// Like rename(), these change directory entries only: make them durable with fsync_directory() of
// the parent (file.hpp).
//
//   co_await make_directory(dir + "/chk-7");            // then fsync_directory(dir)
//   co_await remove(dir + "/chk-3/_manifest");          // files first,
//   co_await remove_directory(dir + "/chk-3");          // then the (now empty) directory

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::io {

// mkdir(2): fails with EEXIST if `path` exists (whatever it is).
runtime::task<result<void>> make_directory(std::string path, unsigned mode = 0755);

// unlink(2) of a file (not a directory: that fails with EISDIR).
runtime::task<result<void>> remove(std::string path);

// rmdir(2) of an empty directory (ENOTEMPTY otherwise).
runtime::task<result<void>> remove_directory(std::string path);

// Every name in `dir` but "." and "..", unsorted (at most max_directory_entries). io_uring has no
// getdents: the listing runs on the executor's blocking-work pool (runtime/offload.hpp), so a slow
// directory (NFS) stalls the awaiting task, never its executor; under a simulation it runs inline on
// the simulated system. Errors: "list directory '<dir>': <strerror>".
runtime::task<result<std::vector<std::string>>> list_directory(std::string dir);

// --- Blocking helpers ----------------------------------------------------------------------------
// Start-up needs a few small metadata calls before any executor runs. These are BLOCKING calls on
// the calling thread, made through its runtime::sys() (system.hpp): for start-up and the CLI, off
// any executor (an executor awaits list_directory above instead). Those returning int give 0 or
// -errno, and leave the message to the caller, who knows what the path is for.

// Every name in `dir` but "." and "..", unsorted. At most max_directory_entries names.
// Errors: "list directory '<dir>': <strerror>".
inline constexpr std::size_t max_directory_entries = 1u << 20;
result<std::vector<std::string>> list_directory_blocking(const std::string& dir);

// `path` and its missing parents made (mode 0777, less the umask), as `mkdir -p` does, and durably:
// the parent of every directory made (and of `path`) is fsynced. 0 if it is a directory already,
// -ENOTDIR if it or a parent is something else, -EINVAL for "".
int make_directories_blocking(const std::string& path);
// fsync(2) of a directory, opened and closed here: its entries become durable. 0 or -errno.
int fsync_directory_blocking(const std::string& dir);

// Whether stat(2) finds a directory at `path` (symlinks followed); false on any error.
bool is_directory_blocking(const std::string& path);

// If `path` or one of its parents is a symbolic link whose target does not exist (what makes mkdir
// say "File exists" and open say "No such file or directory"), says so: "'out' is a dangling
// symbolic link to '/gone/out'". Nothing otherwise.
std::optional<std::string> dangling_symlink_blocking(const std::string& path);

// The whole file at `path` into `text`, read to its end; -EFBIG past `max_bytes`. Opened
// O_NONBLOCK, so a FIFO without a writer fails instead of blocking.
int read_file_blocking(const std::string& path, std::string& text, std::size_t max_bytes);

// All of `text` written to `fd` from `offset` (pwrite, retried on a short write and on EINTR);
// -EIO if the kernel makes no progress.
int write_all_blocking(int fd, std::string_view text, std::uint64_t offset);

// `path` made absolute against the working directory (runtime::sys().current_directory()), as
// std::filesystem::absolute does but without asking the kernel: a lexical join, nothing resolved.
// An absolute or empty path is returned as it is.
std::string absolute_path(const std::string& path);

}  // namespace sluice::io
