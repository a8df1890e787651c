#include <sluice/dataflow/connector_parts.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/sources.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>
#include <tuple>

namespace sluice::dataflow {

// --- line_source -----------------------------------------------------------------------------------

runtime::task<io::result<void>> line_source::open() {
  // The range is fixed by the file's size at the first start; a restart finds it in the state.
  io::result<line_file_reader> probe = co_await line_file_reader::open(path_, 0, max_line_bytes_, expected_size_);
  if (!probe) co_return std::move(probe).error();
  const std::uint64_t size = probe.value().file_size();
  (void)co_await probe.value().close();
  end_offset_ = size * (subtask_ + 1) / parallelism_;
  begin_offset_ = size * subtask_ / parallelism_;
  std::uint64_t start = begin_offset_;
  if (restored_offset_) {
    start = *restored_offset_;
  } else if (start > 0) {
    // The line that crosses into the range belongs to the previous one: skip it.
    io::result<line_file_reader> r = co_await line_file_reader::open(path_, start - 1, max_line_bytes_, size);
    if (!r) co_return std::move(r).error();
    io::result<std::optional<std::string_view>> skipped = co_await r.value().next_line();
    if (!skipped) co_return std::move(skipped).error();
    start = r.value().offset_bytes();
    (void)co_await r.value().close();
  }
  io::result<line_file_reader> reader = co_await line_file_reader::open(path_, start, max_line_bytes_, size);
  if (!reader) co_return std::move(reader).error();
  reader_.emplace(std::move(reader).value());
  opened_ = true;
  co_return io::result<void>();
}

std::optional<source_progress> line_source::progress() const noexcept {
  if (!opened_) return std::nullopt;
  const std::uint64_t total = end_offset_ - std::min(begin_offset_, end_offset_);
  if (ended_) return source_progress{total, total};
  const std::uint64_t at = reader_ ? reader_->offset_bytes() : begin_offset_;
  return source_progress{std::min(total, at - std::min(at, begin_offset_)), total};
}

runtime::task<io::result<read_status>> line_source::read(source_output<std::string>& out, std::size_t max_records) {
  if (ended_) {
    // Again after a restore: downstream needs it, and emits nothing twice.
    if (latest_time_) out.watermark(*latest_time_);
    co_return read_status::end;
  }
  for (std::size_t i = 0; i < max_records; ++i) {
    // The range's end; the task whose range ends the file reads on, to end of file, which checks
    // that nothing follows the fingerprinted size.
    if (reader_->offset_bytes() >= end_offset_ && end_offset_ < reader_->file_size()) {
      ended_ = true;
      break;
    }
    io::result<std::optional<std::string_view>> line = co_await reader_->next_line();
    if (!line) co_return std::move(line).error();
    if (!line.value()) {
      ended_ = true;
      break;
    }
    if (time_) {
      const std::uint64_t at = reader_->offset_bytes() - line.value()->size() - 1;
      std::uint64_t t = 0;
      try {
        t = time_(*line.value());
      } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("{} at byte {}: {}", path_, at, e.what()));
      }
      if (latest_time_ && t < *latest_time_) {
        throw std::runtime_error(fmt::format("{} at byte {}: time {} is before the previous line's {} (the input must be "
                                             "sorted by time)", path_, at, t, *latest_time_));
      }
      latest_time_ = t;
    }
    out.emit(std::string(*line.value()));
  }
  if (!ended_) {
    if (latest_time_ && *latest_time_ > 0) out.watermark(*latest_time_ - 1);
    co_return read_status::more;
  }
  if (latest_time_) out.watermark(*latest_time_);
  co_return read_status::end;
}

std::vector<std::byte> line_source::position() const {
  const std::uint64_t offset = reader_ ? reader_->offset_bytes() : restored_offset_.value_or(0);
  return detail::encode_state(std::make_tuple(offset, end_offset_, ended_, latest_time_.has_value(), latest_time_.value_or(0)));
}

void line_source::restore(std::span<const std::byte> bytes) {
  auto [offset, end, ended, timed, latest] =
      detail::decode_state<std::tuple<std::uint64_t, std::uint64_t, bool, bool, std::uint64_t>>(bytes, "line source");
  restored_offset_ = offset;
  (void)end;
  ended_ = ended;
  latest_time_ = timed ? std::optional<std::uint64_t>(latest) : std::nullopt;
}

// --- indexed_line_source ---------------------------------------------------------------------------

runtime::task<io::result<void>> indexed_line_source::open() {
  io::result<line_file_reader> reader = co_await line_file_reader::open(path_, offset_, max_line_bytes_, expected_size_);
  if (!reader) co_return std::move(reader).error();
  reader_.emplace(std::move(reader).value());
  size_ = reader_->file_size();
  opened_ = true;
  co_return io::result<void>();
}

std::optional<source_progress> indexed_line_source::progress() const noexcept {
  if (!opened_) return std::nullopt;
  if (ended_) return source_progress{size_, size_};
  return source_progress{std::min(size_, reader_ ? reader_->offset_bytes() : offset_), size_};
}

runtime::task<io::result<read_status>> indexed_line_source::read(source_output<record>& out, std::size_t max_records) {
  if (!ended_) {
    for (std::size_t i = 0; i < max_records; ++i) {
      io::result<std::optional<std::string_view>> line = co_await reader_->next_line();
      if (!line) co_return std::move(line).error();
      if (!line.value()) {
        ended_ = true;
        break;
      }
      out.emit(std::make_pair(next_index_, std::string(*line.value())));
      ++next_index_;
      if (next_index_ % watermark_every == 0) out.watermark(next_index_ - 1);
    }
    offset_ = reader_->offset_bytes();
    if (!ended_) co_return read_status::more;
  }
  if (next_index_ > 0) out.watermark(next_index_ - 1);
  co_return read_status::end;
}

std::vector<std::byte> indexed_line_source::position() const {
  return detail::encode_state(std::make_tuple(offset_, next_index_, ended_));
}

void indexed_line_source::restore(std::span<const std::byte> bytes) {
  auto [offset, index, ended] =
      detail::decode_state<std::tuple<std::uint64_t, std::uint64_t, bool>>(bytes, "indexed line source");
  offset_ = offset;
  next_index_ = index;
  ended_ = ended;
}

// --- job_builder -----------------------------------------------------------------------------------
// Each source names its kind in the stage's identity and its file in stage_def::inputs (whose size
// and CRC32C the job's fingerprint records).

source_spec<std::string> file_lines_spec(std::string path) {
  source_spec<std::string> spec;
  spec.identity = {"source=read_lines"};
  spec.input_files = {path};
  spec.make = [path](const connector_context& c) {
    return std::make_unique<line_source>(path, c.subtask, c.parallelism, line_source::time_fn{}, c.max_record_bytes,
                                         c.input_size(path));
  };
  return spec;
}

stream<std::string> job_builder::read_lines(std::string name, std::string path, std::size_t parallelism) {
  return read_from(std::move(name), parallelism, file_lines_spec(std::move(path)));
}

stream<std::string> job_builder::read_timed_lines(std::string name, std::string path, std::size_t parallelism,
                                                  std::function<std::uint64_t(std::string_view)> time) {
  if (!time) throw std::invalid_argument("read_timed_lines: a time function is required");
  source_spec<std::string> spec;
  spec.identity = {"source=read_timed_lines"};
  spec.input_files = {path};
  spec.make = [path, time](const connector_context& c) {
    return std::make_unique<line_source>(path, c.subtask, c.parallelism, time, c.max_record_bytes, c.input_size(path));
  };
  return read_from(std::move(name), parallelism, std::move(spec));
}

stream<std::pair<std::uint64_t, std::string>> job_builder::read_indexed_lines(std::string name, std::string path) {
  source_spec<indexed_line_source::record> spec;
  spec.identity = {"source=read_indexed_lines"};
  spec.input_files = {path};
  spec.make = [path](const connector_context& c) {
    return std::make_unique<indexed_line_source>(path, c.max_record_bytes, c.input_size(path));
  };
  return read_from(std::move(name), 1, std::move(spec));
}

}  // namespace sluice::dataflow
