// job_directories (see job_directories.hpp): the locks on a job's directories and the marker that
// makes an output directory the job's own.

#include "job_directories.hpp"

#include <sluice/dataflow/exactly_once_file_sink.hpp>

#include <sluice/io/fs.hpp>
#include <sluice/runtime/system.hpp>

#include <fmt/core.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

namespace sluice::dataflow::detail {

namespace {

constexpr std::string_view marker_header = "sluice output directory, version 1";

// A marker is a few short lines; anything longer is not one of ours.
constexpr std::size_t max_marker_bytes = 1u << 20;

io::error refused(std::string message) {
  return io::error(std::make_error_code(std::errc::operation_not_permitted), std::move(message));
}

// `dir` made (with its parents) and resolved to an absolute path without symlinks.
io::result<std::string> make_and_resolve(const std::string& dir, std::string_view what) {
  if (const int rc = io::make_directories_blocking(dir); rc < 0) {
    if (std::optional<std::string> dangling = io::dangling_symlink_blocking(dir)) {
      // (mkdir's own word for it is "File exists")
      return io::error(std::error_code(-rc, std::system_category()),
                       fmt::format("create {} '{}': {} (its target does not exist); create the target or remove the "
                                   "link",
                                   what, dir, *dangling));
    }
    return io::error::from_errno(-rc, fmt::format("create {} '{}'", what, dir));
  }
  std::string resolved;
  if (const int rc = runtime::sys().realpath(dir.c_str(), resolved); rc < 0) {
    return io::error::from_errno(-rc, fmt::format("resolve {} '{}'", what, dir));
  }
  return resolved;
}

// `dir` as it will resolve once made: the realpath of its deepest existing ancestor, then the rest
// of it (lexically: ".." takes a component back). Nothing is made.
io::result<std::string> resolve_to_be(const std::string& dir, std::string_view what) {
  std::string at = io::absolute_path(dir);
  std::vector<std::string> rest;  // the components not there yet, innermost first
  for (std::size_t depth = 0;; ++depth) {
    std::string resolved;
    const int rc = runtime::sys().realpath(at.c_str(), resolved);
    if (rc == 0) {
      for (auto it = rest.rbegin(); it != rest.rend(); ++it) {
        if (*it == "..") {
          const std::size_t slash = resolved.rfind('/');
          resolved.resize(slash == 0 || slash == std::string::npos ? 1 : slash);
        } else if (*it != "." && !it->empty()) {
          resolved += resolved.back() == '/' ? *it : "/" + *it;
        }
      }
      return resolved;
    }
    const std::size_t slash = at.rfind('/');
    if ((rc != -ENOENT && rc != -ENOTDIR) || slash == std::string::npos || at == "/" || depth > 4096) {
      return io::error::from_errno(-rc, fmt::format("resolve {} '{}'", what, dir));
    }
    rest.push_back(at.substr(slash + 1));
    at = slash == 0 ? std::string("/") : at.substr(0, slash);
  }
}

// Whether `inner` is `outer` or below it (both resolved).
bool is_within(const std::string& inner, const std::string& outer) {
  if (inner == outer) return true;
  const std::string prefix = outer == "/" ? outer : outer + "/";
  return inner.starts_with(prefix);
}

// An output directory inside the checkpoint directory (retention and recovery read chk-<id> names
// there), or the checkpoint directory inside an output directory (a fresh start clears what it
// finds there): refused, naming both.
io::result<void> refuse_nested(const std::string& checkpoint_dir, const std::vector<std::string>& output_dirs) {
  auto checkpoint = resolve_to_be(checkpoint_dir, "checkpoint directory");
  if (!checkpoint) return std::move(checkpoint).error();
  for (const std::string& dir : output_dirs) {
    auto output = resolve_to_be(dir, "output directory");
    if (!output) return std::move(output).error();
    if (*output == *checkpoint) continue;  // refused in lock_outputs, with its own message
    if (is_within(*output, *checkpoint)) {
      return refused(fmt::format("output directory '{}' ('{}') is inside checkpoint directory '{}' ('{}'); give each "
                                 "a directory of its own, neither inside the other",
                                 dir, *output, checkpoint_dir, *checkpoint));
    }
    if (is_within(*checkpoint, *output)) {
      return refused(fmt::format("checkpoint directory '{}' ('{}') is inside output directory '{}' ('{}'); give each "
                                 "a directory of its own, neither inside the other",
                                 checkpoint_dir, *checkpoint, dir, *output));
    }
  }
  return io::success();
}

// The marker's text, or nothing if there is no marker.
io::result<std::optional<std::string>> read_marker(const std::string& path) {
  struct stat st {};
  const int rc = runtime::sys().stat(path.c_str(), &st);
  if (rc == -ENOENT || rc == -ENOTDIR) return std::optional<std::string>{};
  if (rc < 0) return io::error::from_errno(-rc, fmt::format("read marker '{}'", path));
  std::string text;
  if (!S_ISREG(st.st_mode) || io::read_file_blocking(path, text, max_marker_bytes) < 0) {
    return io::error(std::make_error_code(std::errc::io_error), fmt::format("read marker '{}': unreadable", path));
  }
  return std::optional<std::string>(std::move(text));
}

// The value of the line "<key> <value>" of a marker's text, or "?".
std::string marker_field(const std::string& text, std::string_view key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ') return line.substr(key.size() + 1);
  }
  return "?";
}

// 0 or -errno.
// Writes the marker durably: a temporary file, fsynced, renamed over the marker's name, then the
// directory fsynced. A crash leaves no marker or a whole one (and maybe the temporary file, which
// claim() ignores and the next claim overwrites).
io::result<void> write_marker(const std::string& dir, const std::string& temp_name, const std::string& text) {
  runtime::system& os = runtime::sys();
  const std::string temp = dir + "/" + temp_name;
  const std::string path = dir + "/" + std::string(job_directories::marker_file_name);
  const auto failed = [&path](int rc) { return io::error::from_errno(-rc, fmt::format("write marker '{}'", path)); };
  const int fd = os.open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed(fd);
  int rc = io::write_all_blocking(fd, text, 0);
  if (rc == 0) rc = os.fsync(fd);
  if (const int closed = os.close(fd); closed < 0 && rc == 0) rc = closed;
  if (rc == 0) rc = os.rename(temp.c_str(), path.c_str());
  if (rc == 0) rc = io::fsync_directory_blocking(dir);
  if (rc < 0) return failed(rc);
  return io::success();
}

}  // namespace

io::result<job_directories> job_directories::lock(std::string job_name, const std::string& checkpoint_dir,
                                                  const std::vector<std::string>& output_dirs,
                                                  std::optional<unsigned> worker) {
  if (auto nested = refuse_nested(checkpoint_dir, output_dirs); !nested) return std::move(nested).error();
  auto checkpoint_path = make_and_resolve(checkpoint_dir, "checkpoint directory");
  if (!checkpoint_path) return std::move(checkpoint_path).error();
  const std::string suffix = worker ? fmt::format(".worker-{}", *worker) : std::string();
  const std::string lock_name = std::string(io::directory_lock::file_name) + suffix;
  auto checkpoint_lock = io::directory_lock::acquire(checkpoint_dir, "checkpoint directory", lock_name);
  if (!checkpoint_lock) return std::move(checkpoint_lock).error();
  job_directories dirs(std::move(job_name), checkpoint_dir, std::move(checkpoint_path).value(),
                       std::move(checkpoint_lock).value());
  dirs.output_dirs_ = output_dirs;
  dirs.lock_name_ = lock_name;
  dirs.marker_temp_ = std::string(marker_temp_file_name) + suffix;
  return dirs;
}

// The output directories are made and locked only once the checkpoint is known to be this job's
// (the checkpoint directory's lock keeps a second instance out meanwhile), so a refused run leaves
// them as they were.
io::result<void> job_directories::lock_outputs() {
  for (const std::string& dir : output_dirs_) {
    auto path = make_and_resolve(dir, "output directory");
    if (!path) return std::move(path).error();
    if (*path == checkpoint_path_) {
      return refused(fmt::format("output directory '{}' is the checkpoint directory; give the output a directory "
                                 "of its own",
                                 dir));
    }
    // Two sinks of one job may share a directory (their task ids keep their files apart).
    const bool known =
        std::any_of(outputs_.begin(), outputs_.end(), [&path](const output& o) { return o.path == *path; });
    if (known) continue;
    auto lock = io::directory_lock::acquire(dir, "output directory", lock_name_);
    if (!lock) return std::move(lock).error();
    outputs_.push_back(output{dir, std::move(path).value(), std::move(lock).value()});
  }
  return io::success();
}

std::string job_directories::marker_text() const {
  return fmt::format("{}\njob {}\ncheckpoint-dir {}\n", marker_header, job_name_, checkpoint_path_);
}

io::result<void> job_directories::claim_outputs(bool resuming) {
  if (outputs_.empty()) {
    io::result<void> locked = lock_outputs();
    if (!locked) return locked;
  }
  for (const output& out : outputs_) {
    auto claimed = claim(out, resuming);
    if (!claimed) return claimed;
  }
  return io::success();
}

io::result<void> job_directories::claim(const output& out, bool resuming) const {
  const std::string expected = marker_text();
  auto marker = read_marker(out.path + "/" + std::string(marker_file_name));
  if (!marker) return std::move(marker).error();
  if (*marker) {
    // Its own: a fresh start removes what earlier runs of the job provably wrote there (their
    // checkpoints are gone, and another parallelism leaves other task ids' files behind).
    if (**marker == expected) return resuming ? io::success() : exactly_once_file_sink::clear_earlier_output(out.path, own_tasks_);
    return refused(fmt::format(
        "output directory '{}' holds the output of job '{}' with checkpoint directory '{}', not of this job ('{}' "
        "with checkpoint directory '{}'); choose an empty or new directory",
        out.dir, marker_field(**marker, "job"), marker_field(**marker, "checkpoint-dir"), job_name_, checkpoint_path_));
  }
  if (resuming) {
    return refused(fmt::format(
        "output directory '{}' holds no output of this job (no {} marker), yet checkpoint directory '{}' holds a "
        "checkpoint to resume from; give the job its own output directory back, or start afresh with a new "
        "checkpoint directory",
        out.dir, marker_file_name, checkpoint_dir_));
  }
  auto names = io::list_directory_blocking(out.path);
  if (!names) return std::move(names).error();
  // The workers of a job across workers claim their shared output directory at once: another one
  // may have written the marker since it was read above. Read it again (it exists now, so this
  // goes no deeper), rather than refuse the job's own marker as foreign.
  if (std::find(names->begin(), names->end(), marker_file_name) != names->end()) return claim(out, resuming);
  std::vector<std::string> foreign;
  for (std::string& name : *names) {
    // (what a crash during a lock or a claim may leave is ours, not foreign)
    // (and, for a job across workers, the other workers' locks and marker files)
    const bool ours = io::directory_lock::is_lock_entry(name) || name.rfind(marker_temp_file_name, 0) == 0;
    if (!ours) foreign.push_back(std::move(name));
  }
  if (!foreign.empty()) {
    std::sort(foreign.begin(), foreign.end());
    const std::string more = foreign.size() > 1 ? fmt::format(" and {} more", foreign.size() - 1) : std::string();
    return refused(fmt::format(
        "output directory '{}' is not empty and holds no output of this job (it holds '{}'{}); choose an empty or "
        "new directory",
        out.dir, foreign.front(), more));
  }
  return write_marker(out.path, marker_temp_, expected);
}

}  // namespace sluice::dataflow::detail
