#pragma once
// line_file_reader: a replayable source that reads a text file line by line through io_uring, in
// 64 KiB chunks, so it never blocks the executor.
//
// Protocol (what a source task does with it, invariant 8):
// - open(path, offset) at start, with the offset the resumed checkpoint stored (0 on a fresh start).
// - next_line() until nullopt. A line is the bytes before a '\n' (the '\n' is dropped, a '\r' is
//   kept); a last line without '\n' is still a line.
// - At a barrier, store offset_bytes(): the byte offset just after the last returned line.
//   Reopening at that offset continues with exactly the next line.
//
// Limits and errors (each message names the file and, where it helps, the offset):
// - A line longer than max_line_bytes is an error, so memory stays bounded (chunk + max line).
// - A start offset beyond the end of the file (it shrank or was replaced) is an error.
// - A file that is not a regular file (a pipe, FIFO, socket, device or directory) is an error: its
//   bytes cannot be read again from an offset (not_replayable() below). run_job refuses such an
//   input before it starts; this check is for a reader opened directly.
// - The file is read as it was when the job fingerprinted it (expected_size_bytes, from
//   job_fingerprint.hpp; without one, as it was when opened): a file of another size at open, one
//   that ends before that size (truncated while read) or one with bytes past it (appended to, or a
//   kernel file such as /proc/version whose stat size is 0) is an error naming the file, both sizes
//   and what happened. Nothing past the size is ever returned: the reader does not follow a growing
//   file, and a job that read one would publish counts of neither version.
//
//   auto r = (co_await line_file_reader::open(path, stored_offset)).value();
//   for (;;) {
//     auto line = co_await r.next_line();
//     if (!line) co_return line.error();
//     if (!*line) break;                    // end of file
//     use(**line);                          // valid until the next call
//   }

#include <sluice/io/file.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::dataflow {

// Why an input of file type `mode` (stat's st_mode, after following symlinks) cannot be replayed, as
// a message naming `path`; nullopt for a regular file. Exactly-once reads an input again from the
// offset a checkpoint stored, so only a regular file will do.
std::optional<std::string> not_replayable(const std::string& path, unsigned mode);

class line_file_reader {
 public:
  static constexpr std::size_t chunk_bytes = 64 * 1024;
  static constexpr std::size_t default_max_line_bytes = std::size_t{16} << 20;  // as job_settings::max_record_bytes

  // Opens `path` and positions the reader at `start_offset_bytes`, which must be the start of a
  // line (0, or an offset_bytes() of an earlier reader of the same file). `expected_size_bytes`:
  // the size the job fingerprinted (an error now if the file has another); none: its size now.
  static runtime::task<io::result<line_file_reader>> open(std::string path, std::uint64_t start_offset_bytes,
                                                          std::size_t max_line_bytes = default_max_line_bytes,
                                                          std::optional<std::uint64_t> expected_size_bytes = {});

  line_file_reader(line_file_reader&&) noexcept = default;
  line_file_reader& operator=(line_file_reader&&) noexcept = default;
  line_file_reader(const line_file_reader&) = delete;
  line_file_reader& operator=(const line_file_reader&) = delete;
  ~line_file_reader() = default;

  // The next line without its '\n', valid until the next call; nullopt at end of file.
  runtime::task<io::result<std::optional<std::string_view>>> next_line();

  // Byte offset just after the last returned line (its '\n' included): what a checkpoint stores.
  std::uint64_t offset_bytes() const noexcept { return offset_bytes_; }
  // Lines returned by this reader (not counting those before the start offset).
  std::uint64_t lines_read() const noexcept { return lines_read_; }
  // The size the reader reads to: the expected size it was opened with (the file had it then).
  std::uint64_t file_size() const noexcept { return file_size_; }
  const std::string& path() const noexcept { return file_.path(); }

  // Closes the file through the ring (a reader dropped without close() closes it synchronously).
  runtime::task<io::result<void>> close() { return file_.close(); }

 private:
  line_file_reader(io::file f, std::uint64_t start_offset_bytes, std::uint64_t file_size_bytes,
                   std::size_t max_line_bytes);

  io::error line_too_long() const;
  // What fill() found (a read at the size that gave bytes, or one before it that gave none): the
  // file's size now, against file_size_.
  runtime::task<io::error> changed(bool grew);
  // Reads one more chunk after the buffered bytes, never past file_size_; sets eof_ at file_size_
  // once a read there finds nothing more (anything is an error: the file grew).
  runtime::task<io::result<void>> fill();

  io::file file_;
  std::vector<char> buffer_;     // buffer_[begin_, end_) is read but not yet returned
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::uint64_t read_offset_bytes_ = 0;  // file offset of buffer_[end_]
  std::uint64_t offset_bytes_ = 0;       // file offset of buffer_[begin_]
  std::uint64_t lines_read_ = 0;
  std::uint64_t file_size_ = 0;
  std::size_t max_line_bytes_ = default_max_line_bytes;
  bool eof_ = false;
  bool fingerprinted_ = false;  // file_size_ is the job's fingerprint's (for the messages)
};

}  // namespace sluice::dataflow
