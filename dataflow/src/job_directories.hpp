#pragma once
// job_directories: what run_job holds on the directories a job writes, from before its first task
// until it returns. Exactly-once output (docs/design.md invariant 8) needs one writer per directory, and
// a writer that never takes another's files for its own.
//
// 1. lock(), before any executor runs: makes the checkpoint directory and takes an
//    io::directory_lock (`.sluice-lock`, flock) on it. A directory that another job holds, in this
//    process or another, or that cannot be written, is refused there.
// 2. claim_outputs(resuming) (blocking: the runner calls it through runtime::offload), once recovery
//    has chosen between a fresh start and a resume (and the
//    checkpoint was found to be this job's), before any task exists: makes and locks every output
//    directory the job's sinks registered (job_builder::output_dirs()) the same way, then each must
//    be this job's own, as its marker `.sluice-output` says (the job's name and the checkpoint
//    directory's absolute path):
//    - the marker of this job: fine (a resume, or a restart of a run that never completed a
//      checkpoint: its sinks then delete what they provably wrote, and start over);
//    - the marker of another job or another checkpoint directory: refused;
//    - no marker, resuming: refused (the output the checkpoint vouches for is not there);
//    - no marker, fresh, nothing in it but `.sluice-lock` (and what a crash in a lock or a claim
//      may leave: `.sluice-lock.probe`, `.sluice-output.tmp`): the marker is written durably
//      (temporary file, fsync, rename, fsync of the directory);
//    - no marker, fresh, anything else in it: refused, and nothing in it is touched.
// Every refusal is a message naming the directory and the reason; run_job returns it with exit
// code 2. The sinks then keep to the files they can prove they wrote (exactly_once_file_sink.hpp).
//
// BLOCKING syscalls (mkdir, flock, readdir, small writes), through the thread's runtime::sys():
// start-up only.

#include <sluice/io/directory_lock.hpp>
#include <sluice/io/result.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::dataflow::detail {

class job_directories {
 public:
  static constexpr std::string_view marker_file_name = ".sluice-output";
  static constexpr std::string_view marker_temp_file_name = ".sluice-output.tmp";

  // `worker`: the index of this worker of a job across workers, which shares the directories with
  // the others: each takes a lock of its own (io::directory_lock, ".sluice-lock.worker-<i>") and
  // writes the marker through a temporary file of its own.
  static io::result<job_directories> lock(std::string job_name, const std::string& checkpoint_dir,
                                          const std::vector<std::string>& output_dirs,
                                          std::optional<unsigned> worker = std::nullopt);

  // The marker this job writes into its output directories.
  std::string marker_text() const;
  io::result<void> claim_outputs(bool resuming);
  // A worker of a job across workers: a fresh start clears only these tasks' earlier output.
  void set_own_tasks(std::function<bool(std::uint64_t task)> mine) { own_tasks_ = std::move(mine); }

 private:
  struct output {
    std::string dir;   // as the job names it (messages)
    std::string path;  // absolute, canonical
    io::directory_lock lock;
  };

  job_directories(std::string job_name, std::string checkpoint_dir, std::string checkpoint_path,
                  io::directory_lock checkpoint_lock)
      : job_name_(std::move(job_name)), checkpoint_dir_(std::move(checkpoint_dir)),
        checkpoint_path_(std::move(checkpoint_path)), checkpoint_lock_(std::move(checkpoint_lock)) {}
  io::result<void> lock_outputs();
  io::result<void> claim(const output& out, bool resuming) const;

  std::string job_name_;
  std::string checkpoint_dir_;   // as given
  std::string checkpoint_path_;  // absolute, canonical
  io::directory_lock checkpoint_lock_;
  std::vector<std::string> output_dirs_;
  std::vector<output> outputs_;
  std::string lock_name_{io::directory_lock::file_name};  // ".sluice-lock" or ".sluice-lock.worker-<i>"
  std::string marker_temp_;                                // the marker's temporary file name
  std::function<bool(std::uint64_t)> own_tasks_;
};

}  // namespace sluice::dataflow::detail
