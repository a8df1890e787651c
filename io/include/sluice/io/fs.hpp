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
#include <string>
#include <vector>

namespace sluice::io {

// mkdir(2): fails with EEXIST if `path` exists (whatever it is).
runtime::task<result<void>> make_directory(std::string path, unsigned mode = 0755);

// unlink(2) of a file (not a directory: that fails with EISDIR).
runtime::task<result<void>> remove(std::string path);

// rmdir(2) of an empty directory (ENOTEMPTY otherwise).
runtime::task<result<void>> remove_directory(std::string path);

// Every name in `dir` but "." and "..", unsorted. io_uring has no "read directory" op, so this is a
// BLOCKING metadata call on the calling thread: for start-up, the CLI and rare maintenance (checkpoint
// retention), never the per-record or per-checkpoint path. At most max_directory_entries names.
// Errors: "list directory '<dir>': <strerror>".
inline constexpr std::size_t max_directory_entries = 1u << 20;
result<std::vector<std::string>> list_directory_blocking(const std::string& dir);

}  // namespace sluice::io
