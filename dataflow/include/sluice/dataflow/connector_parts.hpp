#pragma once
// The stream task's ends made of connectors (connector.hpp): connector_source, the head of a source
// task around a source_connector; connector_sink_tail, the tail of a sink task around a
// sink_connector. The task drives them as any head and tail (task_parts.hpp); these only translate.
//
// connector_sink_tail queues the records its chain hands it (chained calls are synchronous) and
// writes them through the connector from the task's loop (drain), so a slow sink holds up the task,
// never the executor. Records queued at an unaligned barrier are the tail's backlog (they were made
// before the barrier and are written after it): the checkpoint keeps them, so W needs a codec.

#include <sluice/dataflow/connector.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/operators.hpp>
#include <sluice/dataflow/task_parts.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/timer.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace sluice::dataflow {

namespace detail {
// A sink's checkpointed bytes: its run (sink_recovery::run) and then the connector's own. Empty
// state (a fresh start) unframes to a new run; state that does not unframe is an error naming it.
std::string new_sink_run();
std::vector<std::byte> frame_sink_state(const std::string& run, std::vector<std::byte> body);
io::result<sink_recovery> unframe_sink_state(std::vector<std::byte> state);
// Returns once `e` is set, whether or not the caller is being stopped (a close must wait for the
// call in flight to end). Out of line: see connector_sink_tail::drain.
runtime::task<void> wait_set_unstoppable(runtime::event* e);
}  // namespace detail

template <class T>
class connector_source final : public source_head {
 public:
  connector_source(std::unique_ptr<source_connector<T>> connector, collector<T>& down)
      : connector_(std::move(connector)), down_(&down), out_(down) {}

  runtime::task<io::result<void>> open() override { return connector_->open(); }
  runtime::task<io::result<source_status>> produce(std::size_t max_records) override {
    io::result<read_status> r = co_await connector_->read(out_, max_records);
    if (!r) co_return std::move(r).error();
    switch (r.value()) {
      case read_status::more: co_return source_status::more;
      case read_status::idle: co_return source_status::idle;
      case read_status::end: break;
    }
    down_->end_of_data();
    co_return source_status::end;
  }
  runtime::task<void> wait_readable() override { return connector_->wait_readable(); }
  runtime::task<void> close() override { return connector_->close(); }
  std::uint64_t records_produced() const noexcept override { return out_.records(); }
  std::optional<position> input_position() const noexcept override {
    std::optional<source_progress> p = connector_->progress();
    if (!p) return std::nullopt;
    return position{p->done, p->total};
  }
  std::vector<std::byte> snapshot_state() const override { return connector_->position(); }
  void restore_state(std::span<const std::byte> bytes) override { connector_->restore(bytes); }

 private:
  std::unique_ptr<source_connector<T>> connector_;
  collector<T>* down_;
  source_output<T> out_;
};

// Takes T from the chain, hands W = convert(T) to the connector (W = T: as it is).
template <class T, class W = T>
class connector_sink_tail final : public output_tail, public collector<T>, public backlog_source {
 public:
  using clock = std::chrono::steady_clock;
  connector_sink_tail(std::unique_ptr<sink_connector<W>> connector, std::function<W(const T&)> convert,
                      sink_options options = {})
      : connector_(std::move(connector)), convert_(std::move(convert)), options_(options) {}

  void collect(const T& record) override {
    if constexpr (std::is_same_v<T, W>) {
      if (!convert_) {
        queue_.push_back(record);
        return;
      }
    }
    queue_.push_back(convert_(record));
  }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}

  bool backlogged() const noexcept override { return !queue_.empty(); }
  bool ready() const noexcept override {
    return holds_ == 0 && (options_.per_record_delay.count() == 0 || now() >= next_due_);
  }
  runtime::task<void> wait_ready() override {
    if (holds_ > 0) {
      (void)co_await unheld_.wait();
      co_return;
    }
    (void)co_await runtime::sleep_until(next_due_);
  }
  runtime::task<io::result<void>> drain() override {
    while (!queue_.empty()) {
      // (The waits are written out here, not in a helper coroutine: GCC 12 at -O1 under TSan
      // reports a false -Wmismatched-new-delete for a coroutine frame inlined into this one.)
      while (holds_ > 0) {
        const bool woken = co_await unheld_.wait();
        if (!woken) co_return stopped();
      }
      if (!ready()) (void)co_await runtime::sleep_until(next_due_);
      if (holds_ > 0) continue;  // held again while it slept
      io::result<void> written = co_await write_next();
      if (!written) co_return written;
    }
    co_return io::result<void>();
  }
  runtime::task<io::result<void>> drain_ready() override {
    while (!queue_.empty() && ready()) {
      io::result<void> written = co_await write_next();
      if (!written) co_return written;
    }
    co_return io::result<void>();
  }
  bool is_sink() const noexcept override { return true; }
  void hold() override {
    ++holds_;
    ++unclaimed_holds_;
    unheld_.reset();
  }
  // The checkpoint keeps the connector's bytes behind its run (sink_recovery::run).
  runtime::task<io::result<void>> recover(std::vector<std::byte> state) override {
    io::result<sink_recovery> from = detail::unframe_sink_state(std::move(state));
    if (!from) co_return std::move(from).error();
    run_ = from.value().run;
    co_return co_await connector_->recover(std::move(from).value());
  }
  // One call into the connector at a time. The task loop makes every call but one: the precommit of
  // an unaligned checkpoint runs beside it (after hold()), so a commit waits for it and it for a
  // commit in flight; writes wait for the hold to end (drain, ready), the close for both.
  runtime::task<io::result<std::vector<std::byte>>> snapshot(snapshot::checkpoint_id id) override {
    // Its hold: one hold() made for it (any: they are alike), or one of its own.
    if (unclaimed_holds_ > 0) {
      --unclaimed_holds_;
    } else {
      ++holds_;
      unheld_.reset();
    }
    while (busy_) {
      const bool woken = co_await idle_.wait();
      if (!woken) {
        unhold();
        co_return stopped();
      }
    }
    busy_ = true;
    idle_.reset();
    io::result<std::vector<std::byte>> bytes = co_await connector_->precommit(id);
    busy_ = false;
    idle_.set();
    unhold();
    if (!bytes) co_return bytes;
    co_return detail::frame_sink_state(run_, std::move(bytes).value());
  }
  runtime::task<io::result<void>> commit(snapshot::checkpoint_id id) override {
    while (busy_) {
      const bool woken = co_await idle_.wait();
      if (!woken) co_return stopped();
    }
    busy_ = true;
    idle_.reset();
    io::result<void> committed = co_await connector_->commit(id);
    busy_ = false;
    idle_.set();
    co_return committed;
  }
  runtime::task<void> close() override {
    // Not cancellable (the task is stopping here): the connector must not close under a precommit,
    // and a hold is released by the precommit that follows it.
    if (holds_ > 0) co_await detail::wait_set_unstoppable(&unheld_);
    if (busy_) co_await detail::wait_set_unstoppable(&idle_);
    co_await connector_->close();
  }
  std::uint64_t records_out() const noexcept override { return records_; }
  std::vector<std::byte> backlog_state() const override {
    return detail::encode_state(std::vector<W>(queue_.begin(), queue_.end()));
  }
  void restore_backlog(std::span<const std::byte> bytes) override {
    for (W& record : detail::decode_state<std::vector<W>>(bytes, "sink backlog")) queue_.push_back(std::move(record));
  }

 private:
  static io::error stopped() {
    return io::error(std::make_error_code(std::errc::operation_canceled), "the sink task was stopped");
  }
  void unhold() {
    if (--holds_ == 0) unheld_.set();
  }
  runtime::task<io::result<void>> write_next() {
    io::result<void> written = co_await connector_->write(queue_.front());
    if (!written) co_return written;
    queue_.pop_front();
    ++records_;
    if (options_.per_record_delay.count() > 0) next_due_ = std::max(next_due_, now()) + options_.per_record_delay;
    co_return written;
  }
  // The executor's clock: a simulated one under the simulation.
  static clock::time_point now() noexcept { return runtime::executor::current()->now(); }

  std::unique_ptr<sink_connector<W>> connector_;
  std::string run_;
  std::function<W(const T&)> convert_;
  sink_options options_;
  clock::time_point next_due_{};
  // Held (no write) from hold() until the snapshot that follows it returns, and during any
  // snapshot: a count, as an unaligned checkpoint's hold may come while another's precommit runs.
  std::uint32_t holds_ = 0;
  std::uint32_t unclaimed_holds_ = 0;  // hold()s whose snapshot has not begun
  bool busy_ = false;                  // a precommit or a commit is in the connector
  runtime::event unheld_{true};        // set while holds_ == 0
  runtime::event idle_{true};    // set while !busy_
  std::deque<W> queue_;
  std::uint64_t records_ = 0;
};

namespace detail {
inline connector_context context_of(const task_builder& b) {
  connector_context c{b.job_name(), b.stage_name(), b.id(), b.subtask(), b.parallelism(), b.max_record_bytes(), {}};
  c.input_sizes = b.input_sizes();
  return c;
}
inline void check_spec_identity(const std::vector<std::string>& identity, const char* what) {
  if (identity.empty() || identity.front().rfind(what, 0) != 0) {
    throw std::invalid_argument(std::string("connector spec: the first identity entry must name the connector (\"") +
                                what + "<kind>\")");
  }
}
}  // namespace detail

template <class T>
stream<T> job_builder::read_from(std::string name, std::size_t parallelism, source_spec<T> spec) {
  detail::check_spec_identity(spec.identity, "source=");
  if (!spec.make) throw std::invalid_argument("read_from '" + name + "': the source spec has no factory");
  const std::size_t stage = add_stage(std::move(name), parallelism, {});
  for (const std::string& file : spec.input_files) stages_[stage].inputs.push_back(file);
  auto make = spec.make;
  return stream<T>(this, stage, [make](task_builder& b, collector<T>& down) {
    b.set_source(b.make<connector_source<T>>(make(detail::context_of(b)), down));
  }, std::move(spec.identity));
}

template <class T>
template <class W>
void stream<T>::write_to(sink_spec<W> spec, std::type_identity_t<std::function<W(const T&)>> convert,
                         sink_options options) const {
  detail::check_spec_identity(spec.identity, "sink=");
  if (!spec.make) throw std::invalid_argument("write_to: the sink spec has no factory");
  if constexpr (!std::is_same_v<T, W>) {
    if (!convert) throw std::invalid_argument("write_to: a conversion to the sink's record type is required");
  }
  stage_def& stage = close_with_sink(spec.identity);
  for (const std::string& dir : spec.output_dirs) job_->add_output_dir(dir);
  attach_fn attach = take();
  auto make = spec.make;
  stage.build = [attach, make, convert, options](task_builder& b) {
    auto& tail = b.make<connector_sink_tail<T, W>>(make(detail::context_of(b)), convert, options);
    b.set_output(tail);
    attach(b, tail);
  };
}

}  // namespace sluice::dataflow
