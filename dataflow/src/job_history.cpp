// The job's side of the checkpoint history file (job_history.hpp).

#include "job_history.hpp"

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>

#include <sluice/io/fs.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/system.hpp>

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cassert>
#include <span>
#include <utility>

namespace sluice::dataflow::detail {

namespace ss = sluice::snapshot;

namespace {

// A history file larger than this is not read back (counted as empty, so never compacted): far
// beyond 2N lines of any job; the bound keeps a stray huge file from filling memory.
constexpr std::uint64_t max_read_bytes = std::uint64_t{256} << 20;

std::uint64_t now_unix_ms() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(runtime::sys().wall_now().time_since_epoch()).count());
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

}  // namespace

std::vector<std::string> task_names(const job_builder& job, const job_plan& plan) {
  std::vector<std::string> names(plan.tasks().size());
  for (const task_plan& t : plan.tasks()) {
    names.at(t.id) = fmt::format("{}#{}", job.stages().at(t.stage).name, t.subtask);
  }
  return names;
}

runtime::task<io::result<std::string>> read_history_text(std::string path) {
  auto opened = co_await io::file::open(path, io::open_options::read_only());
  if (!opened) {
    if (opened.error().code() == std::errc::no_such_file_or_directory) co_return std::string();
    co_return std::move(opened).error();
  }
  io::file f = std::move(opened).value();
  auto status = co_await f.status();
  std::string text;
  io::result<void> outcome = io::success();
  if (!status) {
    outcome = std::move(status).error();
  } else if (S_ISREG(status->mode) && status->size_bytes <= max_read_bytes) {
    text.resize(status->size_bytes);
    auto n = co_await f.read_full(std::as_writable_bytes(std::span(text.data(), text.size())), 0);
    if (n) {
      text.resize(*n);
    } else {
      outcome = std::move(n).error();
    }
  }
  auto closed = co_await f.close();
  (void)closed;  // read-only: nothing to lose
  if (!outcome) co_return std::move(outcome).error();
  co_return text;
}

job_history::job_history(std::string checkpoint_dir, std::size_t max_entries, std::vector<std::string> task_names)
    : path_(fmt::format("{}/{}", checkpoint_dir, ss::history_file_name)),
      temp_path_(fmt::format("{}/{}", checkpoint_dir, ss::history_temp_file_name)),
      max_entries_(std::max<std::size_t>(max_entries, 1)),
      task_names_(std::move(task_names)) {}

job_history::~job_history() { assert(!pumping_ && "job_history destroyed before close()"); }

void job_history::job_started(std::string job, std::optional<ss::checkpoint_id> resumed_from,
                              std::chrono::nanoseconds restore_duration) {
  ss::history_start s;
  s.unix_ms = now_unix_ms();
  s.job = std::move(job);
  s.resumed_from = resumed_from;
  s.restore_duration = restore_duration;
  enqueue(ss::encode_history_line(s));
}

void job_history::checkpoint_ended(const ss::checkpoint_stats& stats) {
  enqueue(ss::encode_history_line(ss::history_of(stats, task_names_)));
}

void job_history::enqueue(std::string line) {
  if (queue_.size() >= max_queued_lines) {
    if (!warned_queue_) {
      runtime::log::warn("checkpoint history '{}': {} lines wait for the disk; dropping newer ones", path_,
                         queue_.size());
      warned_queue_ = true;
    }
    return;
  }
  queue_.push_back(std::move(line));
  if (!pumping_) {
    pumping_ = true;
    scope_.spawn(pump());
  }
}

runtime::task<void> job_history::close() {
  co_await scope_.join();
  if (file_.is_open()) {
    auto closed = co_await file_.close();
    if (!closed) failed(closed.error());
  }
}

runtime::task<void> job_history::pump() {
  while (!queue_.empty()) {  // bound: at most max_queued_lines queued, each taken once
    std::string line = std::move(queue_.front());
    queue_.pop_front();
    io::result<void> done = co_await append(std::move(line));
    if (!done) {
      failed(done.error());
      co_await drop_file();
    }
  }
  pumping_ = false;
}

void job_history::failed(const io::error& e) {
  if (warned_) return;
  warned_ = true;
  runtime::log::warn("checkpoint history: {} (the history misses lines from here; the job goes on)", e.message());
}

runtime::task<void> job_history::drop_file() {
  if (!file_.is_open()) co_return;
  auto closed = co_await file_.close();
  (void)closed;  // the failure that led here was logged
}

runtime::task<io::result<void>> job_history::open() {
  assert(!file_.is_open());
  auto text = co_await read_history_text(path_);
  if (!text) co_return std::move(text).error();
  lines_ = static_cast<std::size_t>(std::count(text->begin(), text->end(), '\n'));
  needs_newline_ = !text->empty() && text->back() != '\n';
  if (needs_newline_) ++lines_;
  auto opened = co_await io::file::open(path_, io::open_options{.read = false, .write = true, .create = true});
  if (!opened) co_return std::move(opened).error();
  file_ = std::move(opened).value();
  auto size = co_await file_.size();
  if (!size) co_return std::move(size).error();
  size_bytes_ = *size;
  co_return io::success();
}

runtime::task<io::result<void>> job_history::append(std::string line) {
  if (!file_.is_open()) {
    io::result<void> opened = co_await open();
    if (!opened) co_return opened;
  }
  if (needs_newline_) line.insert(line.begin(), '\n');  // the torn last line stays a line of its own
  io::result<void> written = co_await file_.write_all(bytes_of(line), size_bytes_);
  if (!written) co_return written;  // the file is reopened (and its end read again) for the next line
  size_bytes_ += line.size();
  needs_newline_ = false;
  ++lines_;
  if (lines_ > 2 * max_entries_) co_return co_await compact();
  co_return io::success();
}

// The newest max_entries_ lines that decode, into the temporary file, renamed over the history.
runtime::task<io::result<void>> job_history::compact() {
  auto text = co_await read_history_text(path_);
  if (!text) co_return std::move(text).error();
  const ss::history_contents contents = ss::parse_history(*text);
  const std::size_t keep = std::min(contents.events.size(), max_entries_);
  std::string kept;
  for (std::size_t i = contents.events.size() - keep; i < contents.events.size(); ++i) {
    kept += ss::encode_history_line(contents.events[i]);
  }
  auto opened = co_await io::file::open(temp_path_, io::open_options::create_or_truncate());
  if (!opened) co_return std::move(opened).error();
  io::file temp = std::move(opened).value();
  io::result<void> step = co_await temp.write_all(bytes_of(kept), 0);
  if (step) step = co_await temp.fsync();  // compaction is rare: a crash must not leave it empty
  auto closed = co_await temp.close();
  if (step && !closed) step = std::move(closed).error();
  if (step) step = co_await io::rename(temp_path_, path_);
  if (!step) {
    auto removed = co_await io::remove(temp_path_);
    (void)removed;
    co_return step;
  }
  co_await drop_file();  // the old file is gone: continue in the new one
  co_return co_await open();
}

}  // namespace sluice::dataflow::detail
