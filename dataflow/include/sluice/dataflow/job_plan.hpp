#pragma once
// job_plan: where a job's tasks run and what they need, decided from the graph alone, before any
// executor starts (and testable without one).
//
// - Stages -> tasks: task ids are numbered stage by stage, subtask by subtask (stage s's tasks are
//   [first_task, first_task + parallelism)): the same numbers in every run and on every worker.
// - Tasks -> workers -> executors: task t runs on worker t mod W and, there, on executor
//   (t div W) mod E (W workers, E executors each). With one worker: executor t mod E.
// - Outputs (fan-out): a stage's output has one port per input of a stage that reads it (a stage
//   may feed several stages, or one stage twice, as a join of two branches of one stream), ordered
//   by (consumer stage, input). Its partition has the sum of the ports' parallelism as
//   subpartitions: port k's consumer subtask j reads subpartition (the ports before k's parallelism,
//   summed) + j.
// - Channels: one per (producer, consumer) pair of connected stages; channel j of a consumer's gate
//   comes from input i's producers after those of inputs 0..i-1, and carries the producer's
//   subpartition for that consumer subtask (above). A channel between two workers is always TCP;
//   within a worker it is the plan's transport (local, or TCP over loopback).
// - The memory budget: each task's pools hold at most task_buffers (its output queue, priority
//   events, 2 exclusive buffers per input channel and the floating ones). run_job sizes the pools
//   from exactly these numbers, and an executor's share of network memory is the sum over its tasks
//   (plus slack), so no pool ever waits for a segment another pool of the job may hold. The whole:
//     network memory = executors x (max over executors of the sum of task_buffers::total() + 16)
//                      x segment_bytes
//   mapped and faulted in at start (buffers/segment.hpp); memory_budget() breaks it down, and a job
//   over job_settings::network_memory_limit_bytes is refused before it starts.
//
// make() checks the graph: at least one stage, every stage closed by a tail, upstreams defined
// before their consumers, every input of a stage bound to an output port of its upstream; and the
// shape (at least one worker and executor).
// A graph that cannot run is std::invalid_argument naming the stage.

#include <sluice/snapshot/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace sluice::dataflow {

class job_builder;

// How channels within one worker travel: local channels, or TCP over loopback (one transport per
// executor). Channels between workers always travel over the worker's data port.
enum class transport_kind : std::uint8_t { local, tcp };
const char* to_string(transport_kind kind) noexcept;
std::optional<transport_kind> parse_transport(std::string_view text) noexcept;  // "local" or "tcp"

struct plan_shape {
  unsigned workers = 1;
  unsigned executors = 2;  // per worker
  transport_kind transport = transport_kind::local;
  std::size_t floating_buffers = 8;
};

// The most buffers one task's pools hold at once.
struct task_buffers {
  std::size_t output = 0;     // the partition's queue: 3 per downstream subtask + 8 (none for a sink)
  std::size_t priority = 0;   // barriers and markers: 4 (none for a sink)
  std::size_t exclusive = 0;  // 2 per input channel (none for a source)
  std::size_t floating = 0;   // shared by the input channels (none for a source)
  std::size_t total() const noexcept { return output + priority + exclusive + floating; }
};

// What one worker's network memory is made of (see the formula above).
struct memory_budget {
  unsigned executors = 0;
  std::size_t segment_bytes = 0;
  std::size_t segments_per_executor = 0;  // the busiest executor's tasks' buffers + 16
  unsigned busiest_executor = 0;
  std::size_t busiest_tasks = 0;          // tasks on the busiest executor
  task_buffers busiest;                   // their buffers, summed
  std::size_t total_bytes() const noexcept { return std::size_t{executors} * segments_per_executor * segment_bytes; }
};

// One port of a stage's output: input `input` of stage `consumer`, its subtasks reading the
// subpartitions [first_subpartition, first_subpartition + parallelism).
struct output_port {
  std::size_t consumer = 0;
  std::size_t input = 0;
  std::size_t first_subpartition = 0;
  std::size_t parallelism = 0;
  bool operator==(const output_port&) const = default;
};

struct stage_plan {
  std::size_t first_task = 0;
  std::size_t parallelism = 1;
  std::vector<output_port> outputs;  // none: a sink stage
  std::vector<std::size_t> upstreams;
  std::size_t subpartitions() const noexcept {
    return outputs.empty() ? 0 : outputs.back().first_subpartition + outputs.back().parallelism;
  }
  // The port feeding input `input` of stage `consumer`; throws std::out_of_range if there is none.
  const output_port& port_to(std::size_t consumer, std::size_t input) const;
};

struct task_plan {
  snapshot::task_id id = 0;
  std::size_t stage = 0;
  std::size_t subtask = 0;
  unsigned worker = 0;
  unsigned executor = 0;                    // within its worker
  std::size_t downstream_parallelism = 0;   // subpartitions of its output, all ports (0: a sink)
  std::vector<std::size_t> input_channels;  // per upstream stage, in stage_def::upstreams order
  task_buffers buffers;
};

// Channel `gate_channel` of `consumer`'s gate receives subpartition `subpartition` of `producer`.
struct channel_plan {
  snapshot::task_id producer = 0;
  snapshot::task_id consumer = 0;
  std::uint32_t subpartition = 0;
  std::uint32_t gate_channel = 0;
  transport_kind transport = transport_kind::local;
};

class job_plan {
 public:
  // Throws std::invalid_argument for a graph or shape that cannot run.
  static job_plan make(const job_builder& job, plan_shape shape);

  const plan_shape& shape() const noexcept { return shape_; }
  const std::vector<stage_plan>& stages() const noexcept { return stages_; }
  const std::vector<task_plan>& tasks() const noexcept { return tasks_; }
  const task_plan& task(snapshot::task_id id) const { return tasks_.at(id); }
  // The channels into `consumer`, in gate channel order.
  std::vector<channel_plan> inputs_of(snapshot::task_id consumer) const;
  // The channels out of `producer`, in subpartition order.
  std::vector<channel_plan> outputs_of(snapshot::task_id producer) const;
  // Tasks placed on `worker`.
  std::size_t tasks_on(unsigned worker) const noexcept;

  // Segments each executor's pool of `worker` gets: the sum of task_buffers over the tasks of its
  // most demanding executor, plus 16 (every executor gets the same share).
  std::size_t segments_per_executor(unsigned worker = 0) const noexcept;
  // The network memory `worker` maps at start, broken down (segment_bytes: job_settings').
  memory_budget budget(std::size_t segment_bytes, unsigned worker = 0) const noexcept;

 private:
  transport_kind transport_between(snapshot::task_id a, snapshot::task_id b) const noexcept;

  plan_shape shape_;
  std::vector<stage_plan> stages_;
  std::vector<task_plan> tasks_;
};

}  // namespace sluice::dataflow
