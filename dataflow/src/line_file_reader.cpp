// line_file_reader (see the header): a chunked line splitter over io::file reads.
//
// The buffer holds the bytes read but not yet returned, buffer_[begin_, end_). next_line() looks
// for a '\n' there; if none, it moves the partial line to the front and reads one more chunk after
// it. The returned view points into the buffer, which is only changed by the next call.

#include <sluice/dataflow/line_file_reader.hpp>

#include <sluice/runtime/system.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <system_error>
#include <utility>

namespace sluice::dataflow {

namespace {

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// `op` line file `path`: it has `now` bytes, not the `had` it had `when`: what happened.
io::error resized(const char* op, const std::string& path, std::uint64_t now, std::uint64_t had, const char* when) {
  return io::error(std::make_error_code(std::errc::invalid_argument),
                   std::string(op) + " line file " + quoted(path) + ": it has " + std::to_string(now) + " bytes, not the " +
                       std::to_string(had) + " it had " + when + ": it was " +
                       (now < had ? "truncated or replaced" : "appended to or replaced") +
                       " while the job ran; an input must not change until the job ends");
}

constexpr const char* fingerprinted_when = "when the job started (its fingerprint)";
constexpr const char* opened_when = "when it was opened";

}  // namespace

std::optional<std::string> not_replayable(const std::string& path, unsigned mode) {
  if (S_ISREG(mode)) return std::nullopt;
  const char* kind = "not a regular file";
  const char* fix = "save it to a regular file first";
  if (S_ISFIFO(mode)) {
    kind = "a pipe or FIFO";
    fix = "save the stream to a file first";
  } else if (S_ISSOCK(mode)) {
    kind = "a socket";
    fix = "save the stream to a file first";
  } else if (S_ISCHR(mode)) {
    kind = "a character device";
    fix = "save the stream to a file first";
  } else if (S_ISBLK(mode)) {
    kind = "a block device";
    fix = "copy it to a file first";
  } else if (S_ISDIR(mode)) {
    kind = "a directory";
    fix = "name a file, not a directory";
  }
  return "input " + quoted(path) + " is " + kind +
         ": exactly-once needs a replayable source (a regular file that can be read again from a checkpointed "
         "offset); " + fix;
}

line_file_reader::line_file_reader(io::file f, std::uint64_t start_offset_bytes, std::uint64_t file_size_bytes,
                                   std::size_t max_line_bytes)
    : file_(std::move(f)),
      read_offset_bytes_(start_offset_bytes),
      offset_bytes_(start_offset_bytes),
      file_size_(file_size_bytes),
      max_line_bytes_(max_line_bytes) {
  buffer_.resize(chunk_bytes);
}

runtime::task<io::result<line_file_reader>> line_file_reader::open(std::string path, std::uint64_t start_offset_bytes,
                                                                   std::size_t max_line_bytes,
                                                                   std::optional<std::uint64_t> expected_size_bytes) {
  auto opened = co_await io::file::open(path, io::open_options::read_only());
  if (!opened) co_return std::move(opened).error();
  io::file f = std::move(opened).value();
  auto status = co_await f.status();  // statx through the ring
  if (!status) co_return status.error();
  if (std::optional<std::string> why = not_replayable(path, status->mode)) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument), "open line file: " + *why);
  }
  const std::optional<std::uint64_t> size = status->size_bytes;
  if (expected_size_bytes && *size != *expected_size_bytes) {
    co_return resized("open", path, *size, *expected_size_bytes, fingerprinted_when);
  }
  if (*size < start_offset_bytes) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument),
                        "open line file " + quoted(path) + ": start offset " + std::to_string(start_offset_bytes) +
                            " is beyond the end of the file (" + std::to_string(*size) +
                            " bytes): it shrank or was replaced since the offset was stored");
  }
  line_file_reader reader(std::move(f), start_offset_bytes, *size, std::max<std::size_t>(max_line_bytes, 1));
  reader.fingerprinted_ = expected_size_bytes.has_value();
  co_return reader;
}

io::error line_file_reader::line_too_long() const {
  return io::error(std::make_error_code(std::errc::value_too_large),
                   "read line file " + quoted(file_.path()) + ": the line at offset " + std::to_string(offset_bytes_) +
                       " is longer than " + std::to_string(max_line_bytes_) +
                       " bytes, the job's maximum record size (job_settings::max_record_bytes, --max-record-bytes)");
}

runtime::task<io::error> line_file_reader::changed(bool grew) {
  const char* when = fingerprinted_ ? fingerprinted_when : opened_when;
  auto status = co_await file_.status();
  if (!status) co_return status.error();
  const std::uint64_t now = status->size_bytes;
  if (now != file_size_) co_return resized("read", file_.path(), now, file_size_, when);
  if (!grew) {
    co_return io::error(std::make_error_code(std::errc::io_error),
                        "read line file " + quoted(file_.path()) + ": a read at byte " +
                            std::to_string(read_offset_bytes_) + " found its end, before its size (" +
                            std::to_string(file_size_) + " bytes)");
  }
  // The same size, yet bytes past it: its size does not tell its length.
  co_return io::error(std::make_error_code(std::errc::invalid_argument),
                      "read line file " + quoted(file_.path()) + ": it reads more bytes than its size (" +
                          std::to_string(file_size_) + " bytes " + when +
                          "): it is a file whose size does not tell its length (one of /proc or /sys); an input must "
                          "be a regular file that does not change until the job ends");
}

runtime::task<io::result<void>> line_file_reader::fill() {
  // Keep only the partial line, at the front, and make room for one chunk after it.
  if (begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() - end_ < chunk_bytes) buffer_.resize(end_ + chunk_bytes);
  const auto room = std::as_writable_bytes(std::span<char>(buffer_.data() + end_, chunk_bytes));
  if (read_offset_bytes_ >= file_size_) {
    // At the size the file had: a read here must find nothing, or the file grew.
    const auto past = co_await file_.read_at(room, read_offset_bytes_);
    if (!past) co_return past.error();
    if (*past > 0) co_return co_await changed(true);
    eof_ = true;
    co_return io::success();
  }
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, file_size_ - read_offset_bytes_));
  const auto n = co_await file_.read_at(room.first(want), read_offset_bytes_);
  if (!n) co_return n.error();
  if (*n == 0) co_return co_await changed(false);  // it ends before its size
  end_ += *n;
  read_offset_bytes_ += *n;
  co_return io::success();
}

runtime::task<io::result<std::optional<std::string_view>>> line_file_reader::next_line() {
  // Bound: each pass either returns or reads a non-empty chunk (the line grows by > 0 bytes and is
  // capped by max_line_bytes_), or reaches end of file.
  std::size_t scanned = 0;  // bytes of the partial line already searched for '\n'
  for (;;) {
    const char* first = buffer_.data() + begin_;
    const std::size_t available = end_ - begin_;
    const void* newline = std::memchr(first + scanned, '\n', available - scanned);
    if (newline != nullptr) {
      const auto length = static_cast<std::size_t>(static_cast<const char*>(newline) - first);
      if (length > max_line_bytes_) co_return line_too_long();
      begin_ += length + 1;
      offset_bytes_ += length + 1;
      ++lines_read_;
      co_return std::optional<std::string_view>(std::string_view(first, length));
    }
    if (available > max_line_bytes_) co_return line_too_long();
    if (eof_) {
      if (available == 0) co_return std::optional<std::string_view>();
      begin_ = end_;
      offset_bytes_ += available;
      ++lines_read_;
      co_return std::optional<std::string_view>(std::string_view(first, available));
    }
    scanned = available;
    auto filled = co_await fill();
    if (!filled) co_return std::move(filled).error();
  }
}

}  // namespace sluice::dataflow
