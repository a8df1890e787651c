#pragma once
// task_slot: one task of a running job and everything it owns (pools, partition, gate, channels),
// all made and destroyed on its executor by the job runner; stage_shape: where a stage's tasks are.

#include "stream_task.hpp"

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/channel.hpp>
#include <sluice/buffers/input_gate.hpp>
#include <sluice/buffers/local_channel.hpp>
#include <sluice/buffers/result_partition.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/runtime/executor.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace sluice::dataflow::detail {

// One task and what it owns, all made (and destroyed) on its executor.
struct task_slot {
  snapshot::task_id id = 0;
  std::size_t stage = 0;
  std::size_t subtask = 0;
  runtime::executor* executor = nullptr;
  std::size_t executor_index = 0;
  std::unique_ptr<buffers::local_buffer_pool> out_pool;
  std::unique_ptr<buffers::local_buffer_pool> priority_pool;  // barriers and markers of `partition`
  std::unique_ptr<buffers::result_partition> partition;
  std::unique_ptr<buffers::local_buffer_pool> in_pool;
  std::unique_ptr<buffers::input_gate> gate;
  std::unique_ptr<buffers::gate_credit_pump> pump;
  std::unique_ptr<stream_task> task;
  std::vector<std::unique_ptr<buffers::local_channel>> senders;  // local channels out of `partition`
  std::vector<buffers::remote_input*> remote_inputs;
  bool ended = false;
  snapshot::checkpoint_id committed = snapshot::no_checkpoint;  // the newest completion it carried out
};

struct stage_shape {
  std::size_t first_task = 0;
  std::size_t parallelism = 1;
  std::optional<std::size_t> downstream;
};

}  // namespace sluice::dataflow::detail
