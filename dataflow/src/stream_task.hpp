#pragma once
// stream_task: one task of a job, a coroutine on one executor running a mailbox loop (invariants 1,
// 4, 5, 8). Everything the task owns (its gate, partition, barrier handler, checkpoint side,
// operators) is touched only here.
//
// The loop, each turn:
//   1. control messages (the mailbox): trigger (sources), complete (sinks commit), abort, finish,
//      pause (sources);
//   2. output first: anything the chain queued goes out (drain) before more input is taken;
//   3. a source produces a batch of records; another task processes records of the buffer it holds,
//      pausing when its partition has no free buffer: then it takes only priority events (an
//      unaligned barrier must not wait behind backpressure), control messages, or a free buffer;
//   4. otherwise it takes the next gate item, hands it to the barrier handler and carries out the
//      actions (snapshot, capture, finish, abort) before it uses the item.
// A checkpoint's choreography is snapshot::task_checkpoint's; the task lends it a checkpoint_subject
// view: operator states, the sink's state, the output backlog, and the unconsumed input.
// Recovery: operator state is restored first (restore_operators(), before any task of the job runs,
// so a checkpoint that cannot be restored is found before anything is published); then, in run(),
// the sink recovers, recovered output channel state (raw stream bytes) and the backlog are re-sent
// first, and recovered input channel state is processed before any new input, its trailing half
// record left in the channel's deserializer for the live channel to complete.

#include "task_meters.hpp"

#include <sluice/buffers/input_gate.hpp>
#include <sluice/buffers/record_deserializer.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/snapshot/barrier_handler.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>
#include <sluice/snapshot/checkpoint_participant.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>
#include <sluice/snapshot/coordinator.hpp>
#include <sluice/snapshot/state_file_reader.hpp>
#include <sluice/snapshot/task_checkpoint.hpp>

#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sluice::dataflow::detail {

// The sections of a task's state file that are not an operator's (snapshot/task_state.hpp).
inline constexpr std::uint32_t source_index = snapshot::section_index(snapshot::state_section::source);
inline constexpr std::uint32_t sink_index = snapshot::section_index(snapshot::state_section::sink);
// The stack of a paced call into the chain (in_chain): user functions run on it as they would on the
// executor's thread, so more than a blocking operator's default.
inline constexpr runtime::fiber_options paced_fiber{.stack_bytes = 1024 * 1024};
inline constexpr std::uint32_t backlog_index = snapshot::section_index(snapshot::state_section::output_backlog);

// What the job runner hears from its tasks (posted to the runner's executor).
class task_listener {
 public:
  virtual ~task_listener() = default;
  // The task has passed on everything it will ever emit (its input ended and its output queue is
  // empty); the final checkpoint waits for every task to say so, so it covers all output.
  virtual void data_ended(snapshot::task_id task) = 0;
  virtual void task_ended(snapshot::task_id task, std::optional<std::string> failure) = 0;
  // The task has carried out checkpoint `id`'s completion (a sink published what it staged for it).
  virtual void committed(snapshot::task_id task, snapshot::checkpoint_id id) = 0;
};

struct task_wiring {
  snapshot::task_id id = 0;
  std::string name;  // "count#1"
  runtime::executor* executor = nullptr;
  runtime::executor* runner = nullptr;  // the executor of `listener` and of the coordinator
  task_listener* listener = nullptr;
  snapshot::checkpoint_acknowledger* coordinator = nullptr;  // the coordinator, or the leader's (a job across workers)
  snapshot::checkpoint_storage* storage = nullptr;
  snapshot::checkpoint_mode mode = snapshot::checkpoint_mode::aligned;
  std::chrono::milliseconds alignment_timeout{0};
  buffers::input_gate* gate = nullptr;              // none for a source
  buffers::result_partition* partition = nullptr;   // none for a sink stage
  const snapshot::task_state* recovered = nullptr;  // none on a fresh start
  std::size_t max_record_bytes = buffers::default_max_record_bytes;
  // A follower's task (a job across workers, cluster_link.hpp): once its input and output ended, it
  // waits for the order to finish (finish_input) before it ends. The runner gives that order once
  // the leader said finish, and the leader's word that its final checkpoint completed was posted
  // here before it (the same sender, executor 0): so the task commits the final checkpoint first.
  // Its end of data may come from other workers only, and well before that word (which travels
  // through etcd, not the data port): a task that ended on it would leave that checkpoint's staged
  // output unpublished, and the worker would still end the job with exit code 0.
  bool await_finish = false;
};

class stream_task final : public snapshot::checkpoint_participant, private snapshot::checkpoint_subject {
 public:
  stream_task(task_wiring wiring, task_builder built);
  ~stream_task() override;

  // Restores the operators' and the source's state from wiring.recovered (nothing on a fresh
  // start); on the task's executor, before run(). The error says why the state does not restore.
  std::optional<std::string> restore_operators();

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
  // Posted by the runner once the final checkpoint completed: a source ends its partition, and a
  // task that awaits it (task_wiring::await_finish) ends.
  void finish_input();
  // Posted by the runner to stop with a final checkpoint (a drain): a source produces no more records
  // (it still takes part in checkpoints) until the task ends.
  void pause_input();

  const std::string& name() const noexcept { return wiring_.name; }
  std::uint64_t records_in() const noexcept { return records_in_; }
  // A source's records and how far through its input it is; a sink's records written (0 else).
  std::uint64_t records_produced() const noexcept { return built_.source_ != nullptr ? built_.source_->records_produced() : 0; }
  std::optional<source_head::position> input_position() const noexcept {
    return built_.source_ != nullptr ? built_.source_->input_position() : std::nullopt;
  }
  std::uint64_t records_written() const noexcept { return built_.output_->is_sink() ? built_.output_->records_out() : 0; }
  // Whether the task ends in a sink: it commits what each completed checkpoint covers.
  bool publishes() const noexcept { return built_.output_->is_sink(); }
  // For the job's metrics (job_metrics.hpp), on the task's executor: records the chain passed on
  // (to the partition, or a sink's output), bytes in, time idle and backpressured (task_meters.hpp),
  // and the task's watermark (the smallest of its input channels', none before every channel sent
  // one; a source: none).
  std::uint64_t records_out() const noexcept { return built_.output_->records_out(); }
  const task_meters& meters() const noexcept { return meters_; }
  std::optional<std::uint64_t> watermark() const noexcept {
    return watermark_sent_ ? std::optional<std::uint64_t>(watermark_out_) : std::nullopt;
  }
  // Where the task is and what it waits for, in one line without '\n' (a hang report: the
  // simulation's, through the runner's wait_reporter). On the task's executor, or while no
  // executor runs. stream_task_report.cpp.
  std::string describe() const;

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
  struct pause_msg {};
  using message = std::variant<trigger_msg, complete_msg, abort_msg, finish_msg, pause_msg>;

  void post_message(message m);
  runtime::task<io::result<void>> restore();
  runtime::task<io::result<void>> handle_mailbox();
  // A close at the task's end threw: logged, and the task's failure unless it had one.
  void note_close_failure(std::optional<std::string>& failed, const char* part, std::exception_ptr thrown) const;
  runtime::task<io::result<void>> step_source();
  runtime::task<io::result<void>> step_input();
  runtime::task<io::result<void>> step_output();
  // An operator's end of the input run in steps (collector.hpp, stepped_end): one step, or the
  // gate's next item (a barrier) when it has one.
  bool chain_ending() const noexcept;
  runtime::task<io::result<void>> step_end();
  runtime::task<io::result<void>> handle_item(buffers::gate_item item);
  runtime::task<io::result<void>> perform(snapshot::barrier_actions actions);
  runtime::task<io::result<void>> snapshot(snapshot::checkpoint_id id, snapshot::checkpoint_mode mode);
  runtime::task<io::result<void>> resend_output(const snapshot::task_state& state);
  runtime::task<io::result<void>> replay_input(const snapshot::task_state& state);

  // checkpoint_subject
  snapshot::taken_state operator_states(snapshot::checkpoint_id id) override;
  bool is_sink() const noexcept override { return built_.output_->is_sink(); }
  runtime::task<io::result<std::vector<std::byte>>> sink_state(snapshot::checkpoint_id id) override;
  void hold_sink() override { built_.output_->hold(); }
  void fail_task(io::error error) override;
  std::optional<std::vector<std::byte>> output_backlog() const override;
  bool output_backlogged() const noexcept override { return built_.output_->backlogged(); }
  runtime::task<io::result<void>> drain_output() override { return built_.output_->drain(); }
  std::vector<unconsumed_input> unconsumed() override;
  runtime::task<io::result<void>> wait_for_work();
  void process_records();
  template <class F>
  runtime::task<void> in_chain(F fn, bool paced = false);  // below
  void on_event(std::uint32_t channel, const buffers::gate_event& event);
  io::error failure(std::string what) const;

  task_wiring wiring_;
  task_builder built_;
  snapshot::task_checkpoint checkpoint_;
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
  bool input_paused_ = false;  // pause_input()
  bool data_end_reported_ = false;
  std::deque<message> mailbox_;
  runtime::event wake_;
  std::optional<io::error> deferred_failure_;  // fail_task(): the loop ends with it
  std::uint64_t records_in_ = 0;
  task_meters meters_;
  enum class phase { created, restoring, running, ending, awaiting_finish, closing, ended } phase_ = phase::created;
};

// A call into the chain: on a fiber when the stage has blocking operators (they may await there),
// or when it is `paced` (a watermark or the end of the input) and the chain keeps state: a keyed
// operator then emits in paced slices (runtime::pace_point, docs/state.md), every key of a large
// table without holding the executor. The task itself goes on only once the call is done, as when
// it ran in one piece: no record, barrier or message reaches the chain in between.
// (A member template: the loop and the restore's replay, in two files, both call it.)
template <class F>
runtime::task<void> stream_task::in_chain(F fn, bool paced) {
  if (!built_.on_fiber_ && !(paced && !built_.states_.empty())) {
    fn();
    co_return;
  }
  runtime::task<void> on_fiber = runtime::run_fiber(std::move(fn), paced ? paced_fiber : runtime::fiber_options{});
  co_await std::move(on_fiber);
}

}  // namespace sluice::dataflow::detail
