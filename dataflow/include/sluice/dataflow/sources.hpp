#pragma once
// Sources over text files (line_file_reader.hpp), as connectors (connector.hpp). Each stores its
// byte offset (and line index) in the checkpoint as its position, so a restart replays exactly the
// lines after it. job_builder::read_lines / read_timed_lines / read_indexed_lines use them; a job
// may also take them through read_from(name, p, file_lines_spec(path)).
//
// line_source: task i of n reads the lines that START in byte range [size*i/n, size*(i+1)/n).
//   With a time function (read_timed_lines) it also checks that times never go back and sends
//   watermarks: its latest time - 1 after each batch, its latest time at the end.
// indexed_line_source: one task; each line with its 0-based index (event time), and a watermark
// after every `watermark_every` lines and at the end.
//
// Both read the file as the job fingerprinted it (`expected_size_bytes`, connector_context::
// input_sizes; none: its size at open): a file that has another size, ends early or grows while read
// fails the task, naming it (line_file_reader.hpp). The task reading the end of the file checks that
// nothing follows it.

#include <sluice/dataflow/connector.hpp>
#include <sluice/dataflow/line_file_reader.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::dataflow {

class line_source final : public source_connector<std::string> {
 public:
  using time_fn = std::function<std::uint64_t(std::string_view)>;
  line_source(std::string path, std::size_t subtask, std::size_t parallelism, time_fn time = {},
              std::size_t max_line_bytes = line_file_reader::default_max_line_bytes,
              std::optional<std::uint64_t> expected_size_bytes = {})
      : path_(std::move(path)), subtask_(subtask), parallelism_(parallelism), time_(std::move(time)),
        max_line_bytes_(max_line_bytes), expected_size_(expected_size_bytes) {}

  runtime::task<io::result<void>> open() override;
  runtime::task<io::result<read_status>> read(source_output<std::string>& out, std::size_t max_records) override;
  std::optional<source_progress> progress() const noexcept override;  // bytes of its range
  std::vector<std::byte> position() const override;
  void restore(std::span<const std::byte> bytes) override;

 private:
  std::string path_;
  std::size_t subtask_;
  std::size_t parallelism_;
  time_fn time_;
  std::size_t max_line_bytes_;
  std::optional<std::uint64_t> expected_size_;
  std::optional<std::uint64_t> latest_time_;  // with time_: the latest line's
  std::optional<line_file_reader> reader_;
  std::optional<std::uint64_t> restored_offset_;
  std::uint64_t begin_offset_ = 0;  // the range's nominal start (size * subtask / parallelism)
  std::uint64_t end_offset_ = 0;
  bool opened_ = false;
  bool ended_ = false;
};

class indexed_line_source final : public source_connector<std::pair<std::uint64_t, std::string>> {
 public:
  using record = std::pair<std::uint64_t, std::string>;
  static constexpr std::uint64_t watermark_every = 256;
  explicit indexed_line_source(std::string path, std::size_t max_line_bytes = line_file_reader::default_max_line_bytes,
                               std::optional<std::uint64_t> expected_size_bytes = {})
      : path_(std::move(path)), max_line_bytes_(max_line_bytes), expected_size_(expected_size_bytes) {}

  runtime::task<io::result<void>> open() override;
  runtime::task<io::result<read_status>> read(source_output<record>& out, std::size_t max_records) override;
  std::optional<source_progress> progress() const noexcept override;  // bytes of the file
  std::vector<std::byte> position() const override;
  void restore(std::span<const std::byte> bytes) override;

 private:
  std::string path_;
  std::size_t max_line_bytes_;
  std::optional<std::uint64_t> expected_size_;
  std::optional<line_file_reader> reader_;
  std::uint64_t offset_ = 0;
  std::uint64_t size_ = 0;  // the file's, at open
  bool opened_ = false;
  std::uint64_t next_index_ = 0;
  bool ended_ = false;
};

// read_from(name, p, file_lines_spec(path)): read_lines() as a spec (identity "source=read_lines").
source_spec<std::string> file_lines_spec(std::string path);

}  // namespace sluice::dataflow
