#pragma once
// directory: a directory held open, whose entries are looked at and removed relative to its
// descriptor (statx and unlinkat with the directory's fd), each one io_uring operation. It is opened
// with O_NOFOLLOW, so it is never what a symbolic link points to; and what it removes is an entry
// of the directory it opened, whatever the path names by then. This is how checkpoint retention
// removes only what is inside a checkpoint directory, never through a symlink (docs/design.md,
// *Retention*).
//
//   auto d = co_await directory::open_no_follow(root + "/chk-7");   // ELOOP: a symlink, refused
//   auto marker = co_await d->entry_status(".sluice-checkpoint");   // a symlink is reported as one
//   co_await d->remove("task-0.state");                             // unlinkat(fd, name, 0)
//   co_await d->close();
//   co_await remove_directory(root + "/chk-7");                     // rmdir never follows a symlink
//
// An entry name is one component: "", ".", ".." and names holding '/' are refused (EINVAL), so no
// call reaches outside the directory. Errors name the operation and the path:
// "unlink '/data/chk-7/task-0.state': Is a directory". Move-only; an open one is closed
// synchronously when destroyed (close it explicitly, through the ring).

#include <sluice/io/file.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <string>

namespace sluice::io {

class directory {
 public:
  directory() noexcept = default;
  directory(directory&& other) noexcept;
  directory& operator=(directory&& other) noexcept;
  directory(const directory&) = delete;
  directory& operator=(const directory&) = delete;
  ~directory();

  // open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW): a symlink fails with ELOOP ("open directory
  // '<path>': it is a symbolic link, not followed"), anything else but a directory with ENOTDIR.
  // (The kernel answers ENOTDIR for a symlink too; an lstat then tells them apart.)
  static runtime::task<result<directory>> open_no_follow(std::string path);

  // statx of the entry `name` without following it (AT_SYMLINK_NOFOLLOW): its type and size.
  runtime::task<result<file_status>> entry_status(std::string name) const;
  // unlinkat(fd, name, 0): the entry itself (a symlink, not its target); a directory fails EISDIR.
  runtime::task<result<void>> remove(std::string name);
  runtime::task<result<void>> close();

  bool is_open() const noexcept { return fd_ >= 0; }
  const std::string& path() const noexcept { return path_; }

 private:
  directory(int fd, std::string path) noexcept : fd_(fd), path_(std::move(path)) {}
  void close_now() noexcept;

  int fd_ = -1;
  std::string path_;
};

// statx(path) without following a final symlink (lstat, through the ring).
runtime::task<result<file_status>> entry_status(std::string path);

}  // namespace sluice::io
