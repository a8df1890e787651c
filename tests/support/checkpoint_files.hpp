#pragma once
// Test fixtures for checkpoint storage: a task's sample state file (known bytes per channel), a
// whole committed checkpoint made through checkpoint_storage, and stderr capture for log lines.

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <support/state_files.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::test {

// Task `task`'s state in checkpoint `id`: operator 0 "op-<task>", input channel (0, 0) 5000 bytes,
// output subpartition (0, 1) 300 bytes. 5448 bytes in all; record 1's payload starts at byte 84.
inline std::vector<std::byte> sample_task_file(snapshot::checkpoint_id id, snapshot::task_id task, unsigned seed = 0) {
  state_file_builder b(id, task);
  b.add(snapshot::record_type::operator_state, 0, 0, bytes_of("op-" + std::to_string(task)));
  b.add(snapshot::record_type::input_channel, 0, 0, pattern_bytes(5000, 10 * task + 1 + seed));
  b.add(snapshot::record_type::output_channel, 0, 1, pattern_bytes(300, 10 * task + 2 + seed));
  return b.finish();
}
inline constexpr std::size_t sample_task_file_bytes = 5448;
inline constexpr std::size_t sample_record1_payload_offset = 32 + 24 + 4 + 24;

// Makes chk-<id> with tasks 0..tasks-1 written by the blocking test helpers (as the channel-state
// writer would), then commits it with commit_verified. Throws on failure.
inline void make_checkpoint(snapshot::checkpoint_storage& storage, snapshot::checkpoint_id id, unsigned tasks = 2) {
  runtime::sync_wait(storage.create_checkpoint_dir(id)).value();
  std::vector<snapshot::task_id> ids;
  for (snapshot::task_id t = 0; t < tasks; ++t) {
    write_bytes(storage.state_file_path(id, t), sample_task_file(id, t));
    ids.push_back(t);
  }
  runtime::sync_wait(storage.commit_verified(id, snapshot::checkpoint_mode::unaligned, ids, {})).value();
}

// Redirects stderr (fd 2) to a temporary file while alive; text() returns what was written.
class stderr_capture {
 public:
  stderr_capture() {
    runtime::log::flush();  // lines queued before the capture are not its
    std::fflush(stderr);
    char name[] = "/tmp/sluice-stderr-XXXXXX";
    file_ = ::mkstemp(name);
    if (file_ < 0) throw std::runtime_error("mkstemp failed");
    ::unlink(name);
    saved_ = ::dup(2);
    ::dup2(file_, 2);
  }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;
  ~stderr_capture() { restore(); ::close(file_); }

  std::string text() {
    restore();
    std::string out;
    char buf[4096];
    ssize_t n;
    off_t offset = 0;
    while ((n = ::pread(file_, buf, sizeof buf, offset)) > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      offset += n;
    }
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    runtime::log::flush();  // an executor's lines are queued for the log's writer thread
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  int file_ = -1;
  int saved_ = -1;
};

}  // namespace sluice::test
