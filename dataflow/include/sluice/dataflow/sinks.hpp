#pragma once
// The file sink as a connector (connector.hpp): each task of the sink stage owns an
// exactly_once_file_sink, whose lines are staged and published when the checkpoint that covers
// them completes (two-phase commit; see exactly_once_file_sink.hpp). stream::write_lines(dir,
// format) is write_to(file_lines_sink_spec(dir), format).

#include <sluice/dataflow/connector_parts.hpp>
#include <sluice/dataflow/exactly_once_file_sink.hpp>
#include <sluice/dataflow/job.hpp>

#include <functional>
#include <memory>
#include <string>

namespace sluice::dataflow {

class file_lines_sink final : public sink_connector<std::string> {
 public:
  file_lines_sink(std::string dir, snapshot::task_id task) : sink_(std::move(dir), task) {}
  // The run is not needed: the job's marker in the directory keeps other jobs out (job_runner.hpp).
  runtime::task<io::result<void>> recover(sink_recovery from) override {
    co_return co_await sink_.recover(from.precommitted);
  }
  runtime::task<io::result<void>> write(const std::string& line) override { return sink_.write(line); }
  runtime::task<io::result<std::vector<std::byte>>> precommit(snapshot::checkpoint_id id) override {
    return sink_.snapshot(id);
  }
  runtime::task<io::result<void>> commit(snapshot::checkpoint_id id) override { return sink_.commit(id); }
  runtime::task<void> close() override { return sink_.close(); }

 private:
  exactly_once_file_sink sink_;
};

// Lines into `dir` (identity "sink=write_lines", the directory; the job locks the directory).
inline sink_spec<std::string> file_lines_sink_spec(const std::string& dir) {
  sink_spec<std::string> spec;
  spec.identity = {"sink=write_lines", "write_lines.dir=" + detail::identity_path(dir)};
  spec.output_dirs = {dir};
  spec.make = [dir](const connector_context& c) { return std::make_unique<file_lines_sink>(dir, c.task); };
  return spec;
}

template <class T>
void stream<T>::write_lines(std::string dir, std::function<std::string(const T&)> format, sink_options options) const {
  // (A slow sink's delay is not identity: it changes when lines are written, not which.)
  write_to<std::string>(file_lines_sink_spec(dir), std::move(format), options);
}

}  // namespace sluice::dataflow
