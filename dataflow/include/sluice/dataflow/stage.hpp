#pragma once
// A job's stages as the job API builds them (job.hpp) and the runner makes tasks of them: stage_def
// (name, parallelism, upstreams, the chain's build function and identity, its output ports, its key
// groups when keyed) and task_builder, what a stage's build function fills in for each task (the
// chain's parts, head and tail, its state and flushables, the tees of streams taken twice).

#include <sluice/buffers/result_partition.hpp>
#include <sluice/dataflow/collector.hpp>
#include <sluice/dataflow/fanout.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/key_group.hpp>
#include <sluice/dataflow/task_parts.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::dataflow {

// What a stage's chain is built with, once per task.
class task_builder {
 public:
  task_builder(snapshot::task_id id, std::size_t subtask, std::size_t parallelism,
               buffers::result_partition* partition, std::size_t downstream_parallelism,
               std::vector<std::size_t> input_channels = {})
      : id_(id), subtask_(subtask), parallelism_(parallelism), partition_(partition),
        downstream_parallelism_(downstream_parallelism), input_channels_(std::move(input_channels)) {}

  template <class P, class... Args>
  P& make(Args&&... args) {
    auto part = std::make_unique<P>(std::forward<Args>(args)...);
    P& ref = *part;
    parts_.push_back(std::move(part));
    return ref;
  }
  void add_state(stateful& s) { states_.push_back(&s); }
  // An operator the task flushes before each checkpoint (collector.hpp). Register it before its
  // upstream operators are attached (as the typed API does): the task flushes in reverse order,
  // upstream first, so a flush's output is flushed on by any flushable below it.
  void add_flushable(flushable& f) { flushables_.push_back(&f); }
  // An operator whose end of the input the task runs in steps (collector.hpp).
  void add_stepped_end(stepped_end& s) {
    s.step_by_task();
    enders_.push_back(&s);
  }
  void set_input(input_head& h) { input_ = &h; }
  void set_source(source_head& s) { source_ = &s; }
  void set_output(output_tail& t) { output_ = &t; }
  // The chain has an operator in blocking style: every call into it runs on a fiber.
  void run_on_fiber() noexcept { on_fiber_ = true; }

  snapshot::task_id id() const noexcept { return id_; }
  std::size_t subtask() const noexcept { return subtask_; }
  std::size_t parallelism() const noexcept { return parallelism_; }
  buffers::result_partition* partition() const noexcept { return partition_; }
  std::size_t downstream_parallelism() const noexcept { return downstream_parallelism_; }
  // The gate's channels per input stage, in the order of stage_def::upstreams: channels
  // [sum of the earlier counts, + input_channels()[i]) come from input i.
  const std::vector<std::size_t>& input_channels() const noexcept { return input_channels_; }
  // The job's maximum record size (job_settings::max_record_bytes): sources that read records of
  // their own length (lines) refuse longer ones.
  std::size_t max_record_bytes() const noexcept { return max_record_bytes_; }
  void set_max_record_bytes(std::size_t bytes) noexcept { max_record_bytes_ = bytes; }
  // The stage's input files and the sizes the job's fingerprint recorded (connector_context).
  const std::map<std::string, std::uint64_t>& input_sizes() const noexcept { return input_sizes_; }
  void set_input_sizes(std::map<std::string, std::uint64_t> sizes) { input_sizes_ = std::move(sizes); }
  // The job's and the stage's names (a connector builds its deterministic ids from them).
  const std::string& job_name() const noexcept { return job_name_; }
  const std::string& stage_name() const noexcept { return stage_name_; }
  void set_names(std::string job, std::string stage) {
    job_name_ = std::move(job);
    stage_name_ = std::move(stage);
  }
  // A keyed stage's key groups (its max parallelism, stage_def::key_groups; 0 for a stage that is
  // not keyed) and the contiguous range of them this task owns: the key_by exchange into the stage
  // sends it exactly the keys of these groups (key_group.hpp). Set by the runner.
  std::size_t key_groups() const noexcept { return key_groups_; }
  key_group_range key_groups_owned() const noexcept {
    return key_groups_ == 0 ? key_group_range{} : key_group_range_of(subtask_, parallelism_, key_groups_);
  }
  void set_key_groups(std::size_t groups) noexcept { key_groups_ = groups; }
  // The ports of the stage's output (job_plan.hpp), set by the runner; and the one to input `input`
  // of stage `consumer`.
  void set_outputs(std::vector<output_port> ports) { outputs_ = std::move(ports); }
  const output_port& output_to(std::size_t consumer, std::size_t input) const {
    for (const output_port& p : outputs_) {
      if (p.consumer == consumer && p.input == input) return p;
    }
    throw std::logic_error("task builder: no output port to input " + std::to_string(input) + " of stage " +
                           std::to_string(consumer));
  }

  // The task's tee for a stream several operators take (fanout.hpp), keyed by the stream; made on
  // the first call. Each tee adds a pass to the flush before a barrier: a combiner upstream of a tee
  // flushes into branches whose own combiners may have flushed already.
  template <class T>
  tee_op<T>& tee_for(const void* stream, bool& made) {
    auto it = tees_.find(stream);
    made = it == tees_.end();
    if (!made) return *static_cast<tee_op<T>*>(it->second);
    auto& tee = make<tee_op<T>>();
    tees_.emplace(stream, &tee);
    ++flush_passes_;
    return tee;
  }

  // What the task takes over.
  std::vector<std::unique_ptr<chain_part>> parts_;
  std::vector<stateful*> states_;  // operator index = position
  std::vector<flushable*> flushables_;  // downstream first
  std::vector<stepped_end*> enders_;
  input_head* input_ = nullptr;
  source_head* source_ = nullptr;
  output_tail* output_ = nullptr;
  bool on_fiber_ = false;
  std::size_t flush_passes_ = 1;

 private:
  snapshot::task_id id_;
  std::size_t subtask_;
  std::size_t parallelism_;
  buffers::result_partition* partition_;
  std::size_t downstream_parallelism_;
  std::vector<std::size_t> input_channels_;
  std::size_t max_record_bytes_ = std::size_t{16} << 20;
  std::size_t key_groups_ = 0;
  std::map<std::string, std::uint64_t> input_sizes_;
  std::string job_name_;
  std::string stage_name_;
  std::vector<output_port> outputs_;
  std::unordered_map<const void*, chain_part*> tees_;
};

// One exchange a stage's stream closes into: input `input` of stage `consumer`. `single` builds the
// task's chain when it is the stage's only exchange (a partition_tail); `fan` builds this port's
// branch into the fanout_tail shared by several (fanout.hpp).
struct stage_port {
  std::size_t consumer = 0;
  std::size_t input = 0;
  std::vector<std::string> identity;  // the branch's chain and "output=<kind>"
  std::function<void(task_builder&)> single;
  std::function<void(task_builder&, fanout_tail&, std::size_t port, const output_port&)> fan;
};

struct stage_def {
  std::string name;
  std::size_t parallelism = 1;
  // The stages feeding this one (none: a source stage; two: a two-input stage such as a join). One
  // gate takes them all, input i's channels after those of inputs 0..i-1.
  std::vector<std::size_t> upstreams;
  std::function<void(task_builder&)> build;  // set when the stage's chain is closed by its tail
  bool sink = false;
  // The chain's identity entries, head to tail ("source=read_lines", "op=map", "output=key_by"),
  // set with `build`; and the files its source reads, as given.
  std::vector<std::string> identity;
  std::vector<std::string> inputs;
  // The exchanges the stage's stream closes into, in the order they were closed (empty for a sink).
  std::vector<stage_port> ports;
  // A keyed stage (fed by key_by): its max parallelism, the number of key groups its inputs are
  // routed by (key_group.hpp); 0 for a stage that is not keyed.
  std::size_t key_groups = 0;
};

namespace detail {
// The input of a later stage that reads `stage` and no port of it is bound to yet (the stage just
// added reads it): where the next exchange of `stage` goes. Throws std::logic_error if none.
std::pair<std::size_t, std::size_t> unbound_input(const std::vector<stage_def>& stages, std::size_t stage);
// Sets the stage's build and identity from its ports: one port builds as before fan-out existed (so
// a single exchange's identity is unchanged), several share a fanout_tail. job_plan.cpp.
void close_ports(stage_def& stage);
// Throws std::invalid_argument, naming the stage, unless parallelism <= key_groups <= max_key_groups
// (a stage that is not keyed, key_groups 0, passes). job_plan.cpp.
void check_key_groups(const std::string& stage, std::size_t parallelism, std::size_t key_groups);
// Throws std::invalid_argument if the stage already has an output (a sink or an exchange): a sink
// ends a stage alone.
void check_sink_alone(const stage_def& stage, const std::string& sink);
// An output directory as identity: absolute and lexically normal (no I/O), so the same directory
// named from another working directory or with a trailing '/' is recognised. job_fingerprint.cpp.
std::string identity_path(const std::string& dir);
}  // namespace detail

}  // namespace sluice::dataflow
