#pragma once
// directory_lock: an exclusive claim on a directory for the life of one object, so that two
// processes, or two jobs of one process, never write the same directory at once.
//
// acquire(dir) opens `<dir>/.sluice-lock` (created if missing, O_CLOEXEC), takes
// flock(LOCK_EX | LOCK_NB) on it, then writes the holder's pid into it. The kernel drops the lock
// when that descriptor closes: when the object is destroyed, or when the process ends however it
// ends, so a crash never leaves a stale lock. flock locks belong to the open file description, so
// a second acquire in the same process conflicts too. The file stays behind (removing it would race
// with a process about to lock it); the pid in it only serves the message of whoever is refused.
//
// Taking the lock also proves the directory writable: the lock file, and a probe file created and
// removed beside it, are made before anything else is written there.
//
// BLOCKING syscalls (open, flock, write, unlink), through the thread's runtime::sys(): for
// start-up, before any executor runs.
//
//   auto lock = directory_lock::acquire("/data/chk", "checkpoint directory");
//   if (!lock) return fail(lock.error().message());  // "... is in use by another sluice job (pid 1234)"

#include <sluice/io/result.hpp>

#include <string>
#include <string_view>
#include <utility>

namespace sluice::io {

class directory_lock {
 public:
  static constexpr std::string_view file_name = ".sluice-lock";
  static constexpr std::string_view probe_file_name = ".sluice-lock.probe";

  // `what` names the directory in messages ("checkpoint directory"). `dir` must exist. Errors:
  //   held by someone else (std::errc::resource_unavailable_try_again):
  //     "<what> '<dir>' is in use by another sluice job (pid 1234)" ("(pid unknown)" if unwritten);
  //   anything else: "<what> '<dir>' is not writable: <strerror>" (EACCES, EROFS, ENOTDIR, ...).
  // `name`: the lock file's name; the workers of one job across processes each take their own
  // (".sluice-lock.worker-2", with its probe "<name>.probe"), so that they share the directory and
  // two instances of one worker still exclude each other. Every name starts with file_name.
  static result<directory_lock> acquire(const std::string& dir, std::string_view what,
                                        std::string_view name = file_name);
  // Whether `entry` (a directory entry's name) is a lock file or probe of any worker.
  static bool is_lock_entry(std::string_view entry) noexcept { return entry.substr(0, file_name.size()) == file_name; }

  directory_lock(directory_lock&& other) noexcept;
  directory_lock& operator=(directory_lock&& other) noexcept;
  directory_lock(const directory_lock&) = delete;
  directory_lock& operator=(const directory_lock&) = delete;
  ~directory_lock();  // releases the lock (closes the descriptor)

  const std::string& dir() const noexcept { return dir_; }
  bool held() const noexcept { return fd_ >= 0; }

 private:
  directory_lock(std::string dir, int fd) noexcept : dir_(std::move(dir)), fd_(fd) {}
  void release() noexcept;

  std::string dir_;
  int fd_ = -1;
};

}  // namespace sluice::io
