#pragma once
// stream_task: one task of a job, a coroutine on one executor running a mailbox loop (DESIGN.md
// invariants 1, 4, 5, 8). Everything the task owns (its gate, partition, barrier handler,
// channel-state writer, operators) is touched only here.
//
// The loop, each turn:
//   1. control messages (the mailbox): trigger (sources), complete (sinks commit), abort, finish;
//   2. output first: anything the chain queued goes out (drain) before more input is taken;
//   3. a source produces a batch of records; another task processes records of the buffer it holds,
//      pausing when its partition has no free buffer: then it takes only priority events (an
//      unaligned barrier must not wait behind backpressure), control messages, or a free buffer;
//   4. otherwise it takes the next gate item, hands it to the barrier handler and carries out the
//      actions (snapshot, capture, finish, abort) before it uses the item.
// A checkpoint: aligned ones drain the output, send the barrier in-band and give the writer the
// operator state only; unaligned ones send a priority barrier, persist the output it overtook, the
// unread rest of the current input buffer, the records queued in the tail (operator index
// backlog_index) and then every input buffer the handler captures. A watcher acknowledges or
// declines the checkpoint when the writer's result is in.
// Recovery (before the loop): operator state restored, the sink recovered, recovered output channel
// state and backlog re-sent first, recovered input channel state processed before any new input.

#include <sluice/buffers/input_gate.hpp>
#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/snapshot/barrier_handler.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>
#include <sluice/snapshot/coordinator.hpp>
#include <sluice/snapshot/state_file_reader.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sluice::dataflow::detail {

// Operator indices of the state file beyond the chain's operators (which are 0, 1, ...).
inline constexpr std::uint32_t source_index = 1000;
inline constexpr std::uint32_t sink_index = 1001;
inline constexpr std::uint32_t backlog_index = 1002;

// What the job runner hears from its tasks (posted to the runner's executor).
class task_listener {
 public:
  virtual ~task_listener() = default;
  // The task has passed on everything it will ever emit (its input ended and its output queue is
  // empty); the final checkpoint waits for every task to say so, so it covers all output.
  virtual void data_ended(snapshot::task_id task) = 0;
  virtual void task_ended(snapshot::task_id task, std::optional<std::string> failure) = 0;
};

struct task_wiring {
  snapshot::task_id id = 0;
  std::string name;  // "count#1"
  runtime::executor* executor = nullptr;
  runtime::executor* runner = nullptr;  // the executor of `listener` and of the coordinator
  task_listener* listener = nullptr;
  snapshot::coordinator* coordinator = nullptr;
  snapshot::checkpoint_storage* storage = nullptr;
  snapshot::checkpoint_mode mode = snapshot::checkpoint_mode::aligned;
  std::chrono::milliseconds alignment_timeout{0};
  buffers::input_gate* gate = nullptr;              // none for a source
  buffers::result_partition* partition = nullptr;   // none for a sink stage
  const snapshot::task_state* recovered = nullptr;  // none on a fresh start
};

class stream_task final : public snapshot::checkpoint_participant {
 public:
  stream_task(task_wiring wiring, task_builder built);
  ~stream_task() override;

  // The mailbox loop; runs on the task's executor until the task ends.
  runtime::task<void> run();

  // checkpoint_participant (posted to home() by the coordinator).
  snapshot::task_id id() const noexcept override { return wiring_.id; }
  bool is_source() const noexcept override { return built_.source_ != nullptr; }
  runtime::executor& home() const noexcept override { return *wiring_.executor; }
  void trigger_checkpoint(snapshot::checkpoint_id id, snapshot::checkpoint_mode mode,
                          const snapshot::trigger_options& options) override;
  void notify_checkpoint_complete(snapshot::checkpoint_id id) override;
  void notify_checkpoint_aborted(snapshot::checkpoint_id id, snapshot::abort_reason reason,
                                 std::string_view detail) override;
  // Posted by the runner once the final checkpoint completed: a source ends its partition.
  void finish_input();

  const std::string& name() const noexcept { return wiring_.name; }
  std::uint64_t records_in() const noexcept { return records_in_; }

 private:
  struct trigger_msg {
    snapshot::checkpoint_id id;
    snapshot::checkpoint_mode mode;
  };
  struct complete_msg {
    snapshot::checkpoint_id id;
  };
  struct abort_msg {
    snapshot::checkpoint_id id;
    snapshot::abort_reason reason;
    std::string detail;
  };
  struct finish_msg {};
  using message = std::variant<trigger_msg, complete_msg, abort_msg, finish_msg>;

  void post_message(message m);
  runtime::task<io::result<void>> restore();
  runtime::task<io::result<void>> handle_mailbox();
  runtime::task<io::result<void>> step_source();
  runtime::task<io::result<void>> step_input();
  runtime::task<io::result<void>> step_output();
  runtime::task<io::result<void>> handle_item(buffers::gate_item item);
  runtime::task<io::result<void>> perform(snapshot::barrier_actions actions);
  runtime::task<io::result<void>> snapshot(snapshot::checkpoint_id id, snapshot::checkpoint_mode mode);
  runtime::task<void> watch(snapshot::checkpoint_id id);
  runtime::task<io::result<void>> forward_event(buffers::gate_event event, bool priority,
                                               std::vector<std::vector<buffers::buffer_view>>* overtaken,
                                               std::optional<buffers::buffer_view>* keep = nullptr);
  bool barrier_queued(const buffers::buffer_view& barrier) const;
  runtime::task<void> switch_after_timeout(snapshot::checkpoint_id id, buffers::buffer_view barrier);
  runtime::task<io::result<void>> wait_for_work();
  void process_records();
  template <class F>
  runtime::task<void> in_chain(F fn);
  void on_event(std::uint32_t channel, const buffers::gate_event& event);
  io::error failure(std::string what) const;

  task_wiring wiring_;
  task_builder built_;
  snapshot::channel_state_writer writer_;
  std::optional<snapshot::barrier_handler> handler_;
  std::vector<buffers::record_deserializer> deserializers_;  // per input channel
  std::optional<std::uint32_t> current_channel_;               // whose buffer is being read
  std::vector<std::optional<std::uint64_t>> watermarks_;       // per input channel; none before its first
  std::vector<bool> data_ended_;                               // per input channel
  std::uint64_t watermark_out_ = 0;
  bool watermark_sent_ = false;
  bool input_data_ended_ = false;
  bool source_ended_ = false;
  bool finish_requested_ = false;
  bool data_end_reported_ = false;
  std::deque<message> mailbox_;
  runtime::event wake_;
  runtime::scope watchers_;
  std::uint64_t records_in_ = 0;
};

}  // namespace sluice::dataflow::detail
