#pragma once
// Watermarks for any source from its records' own times (connector.hpp). A stream source (JetStream,
// Kafka) knows offsets, not event time: with_event_time(spec, time, options) wraps the connector
// each task makes so that, after every read(), the task sends
//
//   watermark = latest - max_out_of_orderness - 1
//
// where `latest` is the greatest time(record) the task has emitted: a record may come at most
// max_out_of_orderness behind the latest one, so every time below latest - max_out_of_orderness has
// been seen. At the source's end it sends `latest`. Watermarks the wrapped connector sends itself
// are dropped (one rule per task, never a watermark that goes back).
//
// A record further behind than that is LATE: with late_policy::fail the task fails, naming its time,
// the latest and the bound (the input is not in the order promised: widen the bound); with
// late_policy::pass it goes on, and the operators downstream treat it as late (windows.hpp: dropped
// and counted, or within allowed lateness). `latest` is part of the position in the checkpoint, so a
// restart judges every replayed record exactly as the first run did.
//
// A task whose source has nothing new holds its watermark (no idle timeout): event-time windows
// downstream wait for its next record, or its end. The identity entries (event_time.*) make a
// checkpoint taken with another bound or policy a different job (job_fingerprint.hpp).

#include <sluice/dataflow/connector.hpp>
#include <sluice/dataflow/operators.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::dataflow {

enum class late_policy { fail, pass };

struct event_time_options {
  std::uint64_t max_out_of_orderness = 0;  // in the time function's unit
  late_policy late = late_policy::fail;
};

template <class T>
class event_time_source final : public source_connector<T> {
 public:
  using time_fn = std::function<std::uint64_t(const T&)>;
  event_time_source(std::unique_ptr<source_connector<T>> inner, time_fn time, event_time_options options,
                    std::string what)
      : inner_(std::move(inner)), time_(std::move(time)), options_(options), what_(std::move(what)) {}

  // Position: (whether a time was seen, latest, the wrapped source's position), as operator state.
  void restore(std::span<const std::byte> position) override {
    position_state state;
    try {
      state = detail::decode_state<position_state>(position, "event-time position");
    } catch (const std::exception& e) {
      throw std::runtime_error(what_ + ": the event-time position in the checkpoint (" +
                               std::to_string(position.size()) + " bytes) does not decode: " + e.what());
    }
    auto& [seen, latest, inner] = state;
    latest_ = seen ? std::optional<std::uint64_t>(latest) : std::nullopt;
    sent_ = std::nullopt;
    inner_->restore(inner);
  }
  std::vector<std::byte> position() const override {
    return detail::encode_state(position_state(latest_.has_value(), latest_.value_or(0), inner_->position()));
  }
  runtime::task<io::result<void>> open() override { return inner_->open(); }
  runtime::task<io::result<read_status>> read(source_output<T>& out, std::size_t max_records) override {
    timing relay(*this, out);
    source_output<T> inner_out(relay);
    io::result<read_status> status = co_await inner_->read(inner_out, max_records);
    if (!status) co_return status;
    if (status.value() == read_status::end) {
      if (latest_) send(out, *latest_);
    } else if (latest_ && *latest_ > options_.max_out_of_orderness) {
      send(out, *latest_ - options_.max_out_of_orderness - 1);
    }
    co_return status;
  }
  runtime::task<void> wait_readable() override { return inner_->wait_readable(); }
  runtime::task<void> close() override { return inner_->close(); }
  std::optional<source_progress> progress() const noexcept override { return inner_->progress(); }

 private:
  using position_state = std::tuple<bool, std::uint64_t, std::vector<std::byte>>;

  // Between the wrapped source and the task's output: reads each record's time on its way.
  class timing final : public collector<T> {
   public:
    timing(event_time_source& self, source_output<T>& out) : self_(&self), out_(&out) {}
    void collect(const T& record) override {
      self_->observe(record);
      out_->emit(record);
    }
    void watermark(std::uint64_t) override {}  // replaced by the task's own (see the top)
    void end_of_data() override {}

   private:
    event_time_source* self_;
    source_output<T>* out_;
  };

  void observe(const T& record) {
    std::uint64_t t = 0;
    try {
      t = time_(record);
    } catch (const std::exception& e) {
      throw std::runtime_error(what_ + ": a record's event time: " + e.what());
    }
    if (latest_ && t < *latest_ && *latest_ - t > options_.max_out_of_orderness) {
      if (options_.late == late_policy::fail) {
        throw std::runtime_error(what_ + ": a record with event time " + std::to_string(t) + " came after one with " +
                                 std::to_string(*latest_) + ", more than the max out-of-orderness " +
                                 std::to_string(options_.max_out_of_orderness) +
                                 " behind: the input is not in the order the job was promised (allow more "
                                 "out-of-orderness)");
      }
      return;  // late: downstream operators judge it against their watermark
    }
    if (!latest_ || t > *latest_) latest_ = t;
  }
  void send(source_output<T>& out, std::uint64_t w) {
    if (sent_ && w <= *sent_) return;
    sent_ = w;
    out.watermark(w);
  }

  std::unique_ptr<source_connector<T>> inner_;
  time_fn time_;
  event_time_options options_;
  std::string what_;
  std::optional<std::uint64_t> latest_;  // the greatest time emitted (kept in the position)
  std::optional<std::uint64_t> sent_;    // the last watermark sent by this incarnation
};

// `spec` with watermarks from time(record) (see the top). Identity: the spec's, then
// event_time.max_out_of_orderness=N and event_time.late=fail|pass.
template <class T>
source_spec<T> with_event_time(source_spec<T> spec, std::function<std::uint64_t(const T&)> time,
                               event_time_options options = {}) {
  if (!spec.make) throw std::invalid_argument("with_event_time: the source spec has no factory");
  if (!time) throw std::invalid_argument("with_event_time: a time function is required");
  const std::string what = spec.identity.empty() ? std::string("source") : spec.identity.front();
  spec.identity.push_back("event_time.max_out_of_orderness=" + std::to_string(options.max_out_of_orderness));
  spec.identity.push_back(std::string("event_time.late=") + (options.late == late_policy::fail ? "fail" : "pass"));
  auto make = std::move(spec.make);
  spec.make = [make = std::move(make), time = std::move(time), options, what](const connector_context& c) {
    return std::unique_ptr<source_connector<T>>(std::make_unique<event_time_source<T>>(
        make(c), time, options, what + " (task " + std::to_string(c.subtask) + ")"));
  };
  return spec;
}

}  // namespace sluice::dataflow
