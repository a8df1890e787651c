#pragma once
// file: an open file whose every operation (open, read, write, fsync, size, rename, close) is an
// io_uring operation, so nothing blocks the executor, even on a slow shared filesystem (NFS).
// Errors name the operation and the path: "write '/data/chk-7/state': No space left on device".
//
// - A file is move-only and owns its descriptor. close() goes through the ring, and a stopping
//   task's close still runs. A file still open when destroyed is closed synchronously on the
//   destroying thread (a destructor cannot await), so no descriptor leaks: cheap on a local disk,
//   a flush to the server on NFS for a written file. Close files explicitly.
// - Operations are cancelled through the awaiting task's stop token (with_timeout, when_any, a
//   stopping executor); a cancelled one yields an error with ECANCELED.
// - The file object, and the buffer of an operation, must outlive the operation.
// - Using a closed file yields EBADF ("... (already closed)"); closing twice is a no-op.
//
//   auto f = (co_await file::open(path, open_options::create_or_truncate())).value();
//   if (auto r = co_await f.write_all(bytes, 0); !r) co_return r.error();
//   co_await f.fsync(); co_await f.close();
//   co_await rename(path, final_path); co_await fsync_directory(dir);

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace sluice::io {

struct open_options {
  bool read = true;
  bool write = false;
  bool create = false;     // O_CREAT
  bool truncate = false;   // O_TRUNC (needs write)
  bool exclusive = false;  // O_EXCL: fail if it exists (needs create)
  bool append = false;     // O_APPEND (needs write)
  unsigned mode = 0644;    // permissions of a created file (before umask)

  static constexpr open_options read_only() noexcept { return {}; }
  static constexpr open_options read_write() noexcept { return {.read = true, .write = true}; }
  // Write-only; fails with EEXIST if the file exists.
  static constexpr open_options create_new(unsigned mode = 0644) noexcept {
    return {.read = false, .write = true, .create = true, .exclusive = true, .mode = mode};
  }
  // Write-only; an existing file is emptied.
  static constexpr open_options create_or_truncate(unsigned mode = 0644) noexcept {
    return {.read = false, .write = true, .create = true, .truncate = true, .mode = mode};
  }
  // Write-only, every write at the end; creates the file if needed.
  static constexpr open_options append_only(unsigned mode = 0644) noexcept {
    return {.read = false, .write = true, .create = true, .append = true, .mode = mode};
  }
};

// What statx(2) says about an open file.
struct file_status {
  std::uint64_t size_bytes = 0;
  unsigned mode = 0;  // st_mode: the file's type (S_ISREG, S_ISFIFO, ...) and permissions
};

class file {
 public:
  file() noexcept = default;  // not open
  file(file&& other) noexcept;
  file& operator=(file&& other) noexcept;
  file(const file&) = delete;
  file& operator=(const file&) = delete;
  ~file();

  // Opens `path` (relative to the working directory) through the ring, always O_CLOEXEC.
  static runtime::task<result<file>> open(std::string path, open_options options = {});

  // One read/write at `offset`: may transfer fewer bytes than asked. read_at yields 0 at end of
  // file (and for an empty buffer).
  runtime::task<result<std::size_t>> read_at(std::span<std::byte> buffer, std::uint64_t offset);
  runtime::task<result<std::size_t>> write_at(std::span<const std::byte> data, std::uint64_t offset);

  // Writes every byte, looping over short writes. A write that makes no progress is an error
  // (errc::no_progress), never an endless loop. It submits the rest of a short write without
  // asking: a caller that must be able to stop between two submissions (the channel-state writer
  // once its checkpoint is aborted) loops on write_at itself.
  runtime::task<result<void>> write_all(std::span<const std::byte> data, std::uint64_t offset);
  // Reads until `buffer` is full or end of file; yields the bytes read (< size only at EOF).
  runtime::task<result<std::size_t>> read_full(std::span<std::byte> buffer, std::uint64_t offset);

  runtime::task<result<void>> fsync();
  runtime::task<result<void>> fdatasync();
  // Closes through the ring. The descriptor is released even if the close fails or is cancelled.
  runtime::task<result<void>> close();

  // statx(2) of the descriptor through the ring (IORING_OP_STATX): type, permissions and size.
  runtime::task<result<file_status>> status() const;
  // status().size_bytes.
  runtime::task<result<std::uint64_t>> size() const;

  bool is_open() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }

 private:
  file(int fd, std::string path) noexcept : fd_(fd), path_(std::move(path)) {}
  void close_now() noexcept;

  int fd_ = -1;
  std::string path_;
};

// rename(2) through the ring (atomic replace of `to`). Pair with fsync_directory for durability.
runtime::task<result<void>> rename(std::string from, std::string to);

// Makes a directory's entries durable: opens it (O_DIRECTORY|O_RDONLY), fsyncs it and closes it,
// all through the ring.
runtime::task<result<void>> fsync_directory(std::string dir);

}  // namespace sluice::io
