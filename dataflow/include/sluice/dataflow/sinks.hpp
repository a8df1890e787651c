#pragma once
// The file sink at the end of a stage: write_lines() (job.hpp). Each task of the stage owns an
// exactly_once_file_sink: lines are staged, and published when the checkpoint that covers them
// completes (two-phase commit; see exactly_once_file_sink.hpp).

#include <sluice/dataflow/exactly_once_file_sink.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/runtime/timer.hpp>

#include <algorithm>
#include <chrono>

#include <deque>
#include <functional>
#include <string>

namespace sluice::dataflow {

template <class T>
class file_sink_tail final : public output_tail, public collector<T>, public backlog_source {
 public:
  using clock = std::chrono::steady_clock;
  file_sink_tail(std::string dir, snapshot::task_id task, std::function<std::string(const T&)> format,
                 sink_options options = {})
      : sink_(std::move(dir), task), format_(std::move(format)), options_(options) {}

  void collect(const T& record) override { lines_.push_back(format_(record)); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}

  bool backlogged() const noexcept override { return !lines_.empty(); }
  bool ready() const noexcept override { return options_.per_record_delay.count() == 0 || now() >= next_due_; }
  runtime::task<void> wait_ready() override { (void)co_await runtime::sleep_until(next_due_); }
  runtime::task<io::result<void>> drain() override {
    while (!lines_.empty()) {
      if (!ready()) (void)co_await runtime::sleep_until(next_due_);
      io::result<void> written = co_await write_next();
      if (!written) co_return written;
    }
    co_return io::result<void>();
  }
  runtime::task<io::result<void>> drain_ready() override {
    while (!lines_.empty() && ready()) {
      io::result<void> written = co_await write_next();
      if (!written) co_return written;
    }
    co_return io::result<void>();
  }
  bool is_sink() const noexcept override { return true; }
  runtime::task<io::result<void>> recover(std::vector<std::byte> state) override {
    co_return co_await sink_.recover(state);
  }
  runtime::task<io::result<std::vector<std::byte>>> snapshot(snapshot::checkpoint_id id) override {
    co_return co_await sink_.snapshot(id);
  }
  runtime::task<io::result<void>> commit(snapshot::checkpoint_id id) override { co_return co_await sink_.commit(id); }
  runtime::task<void> close() override { co_await sink_.close(); }
  std::uint64_t records_out() const noexcept override { return records_; }
  // Lines formatted but not written yet (an unaligned checkpoint keeps them; see backlog_source).
  std::vector<std::byte> backlog_state() const override {
    return detail::encode_state(std::vector<std::string>(lines_.begin(), lines_.end()));
  }
  void restore_backlog(std::span<const std::byte> bytes) override {
    for (std::string& line : detail::decode_state<std::vector<std::string>>(bytes, "sink backlog")) {
      lines_.push_back(std::move(line));
    }
  }

 private:
  runtime::task<io::result<void>> write_next() {
    io::result<void> written = co_await sink_.write(lines_.front());
    if (!written) co_return written;
    lines_.pop_front();
    ++records_;
    if (options_.per_record_delay.count() > 0) next_due_ = std::max(next_due_, now()) + options_.per_record_delay;
    co_return written;
  }

  // The executor's clock: a simulated one under the simulation.
  static clock::time_point now() noexcept { return runtime::executor::current()->now(); }

  exactly_once_file_sink sink_;
  std::function<std::string(const T&)> format_;
  sink_options options_;
  clock::time_point next_due_{};
  std::deque<std::string> lines_;
  std::uint64_t records_ = 0;
};

template <class T>
void stream<T>::write_lines(std::string dir, std::function<std::string(const T&)> format, sink_options options) const {
  // (A slow sink's delay is not identity: it changes when lines are written, not which.)
  stage_def& stage = close_with_sink({"sink=write_lines", "write_lines.dir=" + detail::identity_path(dir)});
  attach_fn attach = take();
  job_->add_output_dir(dir);
  stage.build = [attach, dir, format, options](task_builder& b) {
    auto& tail = b.make<file_sink_tail<T>>(dir, b.id(), format, options);
    b.set_output(tail);
    attach(b, tail);
  };
}

}  // namespace sluice::dataflow
