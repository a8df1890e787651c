#pragma once
// The type-erased ends of a stream task's chain, and the typed adapters that make them. A stream
// task (stream_task.hpp) drives:
//   - a head: a source_head (a source task) or an input_head (records decoded from its input gate);
//   - the chain of operators (collector.hpp), built by the job's typed API;
//   - a tail: an output_tail, either a partition (records serialized and routed to the consumer
//     channels) or a sink.
// Chained calls are synchronous; anything that may wait (a full partition, a sink write) is queued
// by the tail and pushed out by the task's loop through drain(), between input records. So a task
// checks its output before it takes more input, and a full output never blocks the executor.

#include <sluice/buffers/codec.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/dataflow/collector.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sluice::dataflow {

class input_head : public chain_part {
 public:
  // Decodes a record that came in on gate channel `channel` and passes it down the chain.
  virtual void record(std::uint32_t channel, std::span<const std::byte> bytes) = 0;
  virtual void watermark(std::uint64_t time) = 0;
  virtual void end_of_data() = 0;
};

// more: call produce() again; idle: nothing at hand now (the task waits for wait_readable(), its
// barriers and messages, whichever comes first); end: exhausted.
enum class source_status { more, idle, end };

class source_head : public chain_part, public stateful {
 public:
  // After restore_state() (if any): open files, seek to the restored position.
  virtual runtime::task<io::result<void>> open() = 0;
  // Passes up to `max_records` records down the chain (watermarks too); `end` once exhausted, after
  // which it has passed end_of_data down the chain.
  virtual runtime::task<io::result<source_status>> produce(std::size_t max_records) = 0;
  // After produce() said idle: returns once it may have more (cancellable: the task also waits for
  // its messages and barriers).
  virtual runtime::task<void> wait_readable() { co_return; }
  // At the end of the task, whether it ended well or not.
  virtual runtime::task<void> close() { co_return; }
  virtual std::uint64_t records_produced() const noexcept = 0;
  // How far through its input it is (bytes of a file, say), for a progress line; none if it cannot
  // tell (a generator without an end).
  struct position {
    std::uint64_t done = 0;
    std::uint64_t total = 0;
  };
  virtual std::optional<position> input_position() const noexcept { return std::nullopt; }
};

class output_tail : public chain_part {
 public:
  // Something queued that drain() must push out before the task takes more input.
  virtual bool backlogged() const noexcept = 0;
  // Pushes the queue out; may wait for buffers or I/O. An error ends the task.
  virtual runtime::task<io::result<void>> drain() = 0;
  // Whether drain_ready() can push something out now, without waiting for the consumer.
  virtual bool ready() const noexcept { return true; }
  // Returns once ready() (or the waiter was stopped).
  virtual runtime::task<void> wait_ready() { co_return; }
  // Pushes out what goes without waiting for the consumer: the task loop calls this, and waits for
  // ready() alongside priority events and control messages, so a full output never holds up an
  // unaligned barrier.
  virtual runtime::task<io::result<void>> drain_ready() { return drain(); }
  virtual bool is_sink() const noexcept { return false; }
  // Sinks: from here until the next snapshot() returns, write nothing (ready() false, drain() and
  // commit() wait): an unaligned checkpoint's precommit runs beside the task (task_checkpoint.hpp).
  virtual void hold() {}
  // Sinks: their two-phase commit (exactly_once_file_sink).
  virtual runtime::task<io::result<void>> recover(std::vector<std::byte> /*state*/) { co_return io::result<void>(); }
  virtual runtime::task<io::result<std::vector<std::byte>>> snapshot(snapshot::checkpoint_id /*id*/) {
    co_return std::vector<std::byte>{};
  }
  virtual runtime::task<io::result<void>> commit(snapshot::checkpoint_id /*id*/) { co_return io::result<void>(); }
  virtual runtime::task<void> close() { co_return; }
  virtual std::uint64_t records_out() const noexcept = 0;
};

// A tail whose queued records must be kept in an unaligned checkpoint: they were produced before the
// barrier but go out (to the partition, or into the sink's file) after it, so recovery queues them
// again, ahead of anything new.
class backlog_source {
 public:
  virtual ~backlog_source() = default;
  virtual std::vector<std::byte> backlog_state() const = 0;
  // Throws std::runtime_error when the bytes do not decode.
  virtual void restore_backlog(std::span<const std::byte> bytes) = 0;
};

// --- typed adapters --------------------------------------------------------------------------

// Decodes T from each record of the gate.
template <class T>
class gate_input final : public input_head {
 public:
  explicit gate_input(collector<T>& out) : out_(&out) {}
  void record(std::uint32_t, std::span<const std::byte> bytes) override { out_->collect(buffers::decode_from<T>(bytes)); }
  void watermark(std::uint64_t time) override { out_->watermark(time); }
  void end_of_data() override { out_->end_of_data(); }

 private:
  collector<T>* out_;
};

// The head of a two-input task (a join, a process_with): gate channels below `left_channels` carry
// L (the left input's, first in the gate), the rest R. Op takes left(L), right(R), watermark(t) and
// end_of_data().
template <class L, class R, class Op>
class two_input_head final : public input_head {
 public:
  two_input_head(std::size_t left_channels, Op& op) : left_channels_(left_channels), op_(&op) {}
  void record(std::uint32_t channel, std::span<const std::byte> bytes) override {
    if (channel < left_channels_) {
      op_->left(buffers::decode_from<L>(bytes));
    } else {
      op_->right(buffers::decode_from<R>(bytes));
    }
  }
  void watermark(std::uint64_t time) override { op_->watermark(time); }
  void end_of_data() override { op_->end_of_data(); }

 private:
  std::size_t left_channels_;
  Op* op_;
};

// What a partition tail queues when a record does not fit at once.
struct pending_output {
  enum class kind : std::uint8_t { record, watermark, end_of_data };
  kind what = kind::record;
  std::size_t subpartition = 0;
  std::vector<std::byte> bytes;  // an encoded record
  std::uint64_t time = 0;
};

// The queue and drain of a partition tail (not a template: in partition_tail.cpp).
class partition_queue {
 public:
  explicit partition_queue(buffers::result_partition& partition) : partition_(&partition) {}
  bool empty() const noexcept { return queue_.empty(); }
  void push(pending_output p) { queue_.push_back(std::move(p)); }
  // A record for `subpartition`: straight into the partition when nothing is queued ahead of it and
  // it fits, else encoded and queued.
  template <class T>
  void push_record(const T& record, std::size_t subpartition) {
    if (queue_.empty() && partition_->try_emit(record, subpartition)) return;
    pending_output p;
    p.subpartition = subpartition;
    buffers::encode_to(p.bytes, record);
    queue_.push_back(std::move(p));
  }
  runtime::task<io::result<void>> drain() { return drain_while(false); }
  // Only while the partition has a buffer for the next item.
  runtime::task<io::result<void>> drain_ready() { return drain_while(true); }
  bool ready() const noexcept;
  runtime::task<void> wait_ready();
  buffers::result_partition& partition() const noexcept { return *partition_; }
  // The queued records as (subpartition, encoded record) pairs, in order (codec encoding, versioned).
  std::vector<std::byte> backlog_state() const;
  void restore_backlog(std::span<const std::byte> bytes);

 private:
  runtime::task<io::result<void>> drain_while(bool only_ready);

  buffers::result_partition* partition_;
  std::deque<pending_output> queue_;
  std::optional<buffers::buffer> event_spare_;  // taken by wait_ready() for the event in front
  bool event_blocked_ = false;                  // the event in front found no free buffer
};

// A tail whose output is a partition_queue: the drain and the unaligned backlog of partition_tail
// and fanout_tail (fanout.hpp).
class queued_output : public output_tail, public backlog_source {
 public:
  explicit queued_output(buffers::result_partition& partition) : queue_(partition) {}
  bool backlogged() const noexcept override { return !queue_.empty(); }
  runtime::task<io::result<void>> drain() override { return queue_.drain(); }
  bool ready() const noexcept override { return queue_.ready(); }
  runtime::task<void> wait_ready() override { return queue_.wait_ready(); }
  runtime::task<io::result<void>> drain_ready() override { return queue_.drain_ready(); }
  std::uint64_t records_out() const noexcept override { return records_; }
  std::vector<std::byte> backlog_state() const override { return queue_.backlog_state(); }
  void restore_backlog(std::span<const std::byte> bytes) override { queue_.restore_backlog(bytes); }

 protected:
  template <class T>
  void push_record(const T& record, std::size_t subpartition) {
    ++records_;
    queue_.push_record(record, subpartition);
  }

  partition_queue queue_;

 private:
  std::uint64_t records_ = 0;
};

// Serializes T into the task's partition, to the subpartition route(record) picks.
template <class T>
class partition_tail final : public queued_output, public collector<T> {
 public:
  partition_tail(buffers::result_partition& partition, std::function<std::size_t(const T&)> route)
      : queued_output(partition), route_(std::move(route)) {}

  void collect(const T& record) override { push_record(record, route_(record)); }
  void watermark(std::uint64_t time) override {
    queue_.push(pending_output{pending_output::kind::watermark, 0, {}, time});
  }
  void end_of_data() override { queue_.push(pending_output{pending_output::kind::end_of_data, 0, {}, 0}); }

 private:
  std::function<std::size_t(const T&)> route_;
};

}  // namespace sluice::dataflow
