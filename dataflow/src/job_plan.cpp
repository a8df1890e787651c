// See job_plan.hpp.

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>

namespace sluice::dataflow {

const char* to_string(transport_kind kind) noexcept { return kind == transport_kind::tcp ? "tcp" : "local"; }

std::optional<transport_kind> parse_transport(std::string_view text) noexcept {
  if (text == "local") return transport_kind::local;
  if (text == "tcp") return transport_kind::tcp;
  return std::nullopt;
}

namespace {

task_buffers buffers_of(const task_plan& t, std::size_t floating) {
  task_buffers b;
  if (t.downstream_parallelism > 0) {
    b.output = 3 * t.downstream_parallelism + 8;
    b.priority = 4;
  }
  std::size_t channels = 0;
  for (std::size_t n : t.input_channels) channels += n;
  if (channels > 0) {
    b.exclusive = 2 * channels;
    b.floating = floating;
  }
  return b;
}

}  // namespace

job_plan job_plan::make(const job_builder& job, plan_shape shape) {
  if (shape.workers == 0) throw std::invalid_argument("job plan: at least one worker");
  if (shape.executors == 0) throw std::invalid_argument("job settings: at least one executor");
  const std::vector<stage_def>& defs = job.stages();
  if (defs.empty()) throw std::invalid_argument("job has no stages");
  job_plan plan;
  plan.shape_ = shape;
  plan.stages_.resize(defs.size());
  std::size_t next_task = 0;
  for (std::size_t s = 0; s < defs.size(); ++s) {
    if (!defs[s].build) throw std::invalid_argument(fmt::format("stage '{}' has no output (add a sink)", defs[s].name));
    detail::check_key_groups(defs[s].name, defs[s].parallelism, defs[s].key_groups);
    stage_plan& st = plan.stages_[s];
    st.first_task = next_task;
    st.parallelism = defs[s].parallelism;
    st.upstreams = defs[s].upstreams;
    next_task += st.parallelism;
    for (std::size_t i = 0; i < defs[s].upstreams.size(); ++i) {
      const std::size_t up = defs[s].upstreams[i];
      if (up >= s) throw std::invalid_argument(fmt::format("stage '{}' reads a stage defined after it", defs[s].name));
      const auto& ports = defs[up].ports;
      const bool bound = std::any_of(ports.begin(), ports.end(),
                                     [&](const stage_port& p) { return p.consumer == s && p.input == i; });
      if (!bound) {
        throw std::invalid_argument(fmt::format("stage '{}' reads stage '{}', whose stream was not closed for it",
                                                defs[s].name, defs[up].name));
      }
      stage_plan& producer = plan.stages_[up];
      producer.outputs.push_back(output_port{s, i, producer.subpartitions(), defs[s].parallelism});
    }
  }
  plan.tasks_.resize(next_task);
  for (std::size_t s = 0; s < defs.size(); ++s) {
    const stage_plan& st = plan.stages_[s];
    for (std::size_t i = 0; i < st.parallelism; ++i) {
      task_plan& t = plan.tasks_[st.first_task + i];
      t.id = static_cast<snapshot::task_id>(st.first_task + i);
      t.stage = s;
      t.subtask = i;
      t.worker = static_cast<unsigned>(t.id % shape.workers);
      t.executor = static_cast<unsigned>((t.id / shape.workers) % shape.executors);
      t.downstream_parallelism = st.subpartitions();
      for (std::size_t up : st.upstreams) t.input_channels.push_back(plan.stages_[up].parallelism);
      t.buffers = buffers_of(t, shape.floating_buffers);
    }
  }
  return plan;
}

transport_kind job_plan::transport_between(snapshot::task_id a, snapshot::task_id b) const noexcept {
  return tasks_[a].worker == tasks_[b].worker ? shape_.transport : transport_kind::tcp;
}

std::vector<channel_plan> job_plan::inputs_of(snapshot::task_id consumer) const {
  std::vector<channel_plan> out;
  const task_plan& c = tasks_.at(consumer);
  std::uint32_t channel = 0;
  const std::vector<std::size_t>& ups = stages_[c.stage].upstreams;
  for (std::size_t i = 0; i < ups.size(); ++i) {
    const stage_plan& up = stages_[ups[i]];
    const auto sub = static_cast<std::uint32_t>(up.port_to(c.stage, i).first_subpartition + c.subtask);
    for (std::size_t j = 0; j < up.parallelism; ++j) {
      const auto producer = static_cast<snapshot::task_id>(up.first_task + j);
      out.push_back(channel_plan{producer, consumer, sub, channel++, transport_between(producer, consumer)});
    }
  }
  return out;
}

std::vector<channel_plan> job_plan::outputs_of(snapshot::task_id producer) const {
  std::vector<channel_plan> out;
  const task_plan& p = tasks_.at(producer);
  for (const output_port& port : stages_[p.stage].outputs) {
    const stage_plan& down = stages_[port.consumer];
    // The consumer's gate channel from this producer: after the channels of its earlier inputs.
    std::size_t before = 0;
    for (std::size_t i = 0; i < port.input; ++i) before += stages_[down.upstreams[i]].parallelism;
    for (std::size_t j = 0; j < port.parallelism; ++j) {
      const auto consumer = static_cast<snapshot::task_id>(down.first_task + j);
      out.push_back(channel_plan{producer, consumer, static_cast<std::uint32_t>(port.first_subpartition + j),
                                 static_cast<std::uint32_t>(before + p.subtask), transport_between(producer, consumer)});
    }
  }
  return out;
}

const output_port& stage_plan::port_to(std::size_t consumer, std::size_t input) const {
  for (const output_port& p : outputs) {
    if (p.consumer == consumer && p.input == input) return p;
  }
  throw std::out_of_range(fmt::format("job plan: no output port to input {} of stage {}", input, consumer));
}

std::size_t job_plan::tasks_on(unsigned worker) const noexcept {
  return static_cast<std::size_t>(
      std::count_if(tasks_.begin(), tasks_.end(), [worker](const task_plan& t) { return t.worker == worker; }));
}

std::size_t job_plan::segments_per_executor(unsigned worker) const noexcept {
  return budget(0, worker).segments_per_executor;
}

memory_budget job_plan::budget(std::size_t segment_bytes, unsigned worker) const noexcept {
  std::vector<task_buffers> per_executor(shape_.executors);
  std::vector<std::size_t> tasks(shape_.executors, 0);
  for (const task_plan& t : tasks_) {
    if (t.worker != worker) continue;
    task_buffers& b = per_executor[t.executor];
    b.output += t.buffers.output;
    b.priority += t.buffers.priority;
    b.exclusive += t.buffers.exclusive;
    b.floating += t.buffers.floating;
    ++tasks[t.executor];
  }
  memory_budget m;
  m.executors = shape_.executors;
  m.segment_bytes = segment_bytes;
  for (unsigned e = 0; e < shape_.executors; ++e) {
    if (per_executor[e].total() > m.busiest.total()) {
      m.busiest = per_executor[e];
      m.busiest_executor = e;
      m.busiest_tasks = tasks[e];
    }
  }
  if (m.busiest_tasks == 0 && !tasks.empty()) m.busiest_tasks = tasks[0];
  m.segments_per_executor = m.busiest.total() + 16;
  return m;
}

}  // namespace sluice::dataflow

namespace sluice::dataflow::detail {

std::pair<std::size_t, std::size_t> unbound_input(const std::vector<stage_def>& stages, std::size_t stage) {
  const std::vector<stage_port>& ports = stages.at(stage).ports;
  for (std::size_t s = stage + 1; s < stages.size(); ++s) {
    for (std::size_t i = 0; i < stages[s].upstreams.size(); ++i) {
      if (stages[s].upstreams[i] != stage) continue;
      const bool bound =
          std::any_of(ports.begin(), ports.end(), [&](const stage_port& p) { return p.consumer == s && p.input == i; });
      if (!bound) return {s, i};
    }
  }
  throw std::logic_error(fmt::format("stage '{}' closed with an exchange, but no stage added since reads it",
                                     stages[stage].name));
}

void close_ports(stage_def& stage) {
  if (stage.ports.size() == 1) {
    stage.build = stage.ports.front().single;
    stage.identity = stage.ports.front().identity;
    return;
  }
  // Each port's branch, after a "port=<consumer>.<input>" entry: the chain and where it goes.
  stage.identity.clear();
  for (const stage_port& p : stage.ports) {
    stage.identity.push_back(fmt::format("port={}.{}", p.consumer, p.input));
    stage.identity.insert(stage.identity.end(), p.identity.begin(), p.identity.end());
  }
  stage.build = [ports = stage.ports](task_builder& b) {
    auto& tail = b.make<fanout_tail>(*b.partition(), ports.size());
    b.set_output(tail);
    for (std::size_t i = 0; i < ports.size(); ++i) {
      ports[i].fan(b, tail, i, b.output_to(ports[i].consumer, ports[i].input));
    }
  };
}

void check_key_groups(const std::string& stage, std::size_t parallelism, std::size_t key_groups) {
  if (key_groups == 0) return;  // not keyed
  if (key_groups > max_key_groups) {
    throw std::invalid_argument(fmt::format("stage '{}': max parallelism {} above the most key groups a stage may have "
                                            "({})", stage, key_groups, max_key_groups));
  }
  if (parallelism > key_groups) {
    throw std::invalid_argument(fmt::format("stage '{}': parallelism {} above its max parallelism {} (key groups); "
                                            "raise it with max_parallelism()", stage, parallelism, key_groups));
  }
}

void check_sink_alone(const stage_def& stage, const std::string& sink) {
  if (stage.sink || !stage.ports.empty()) {
    throw std::invalid_argument(fmt::format(
        "stage '{}' already has an output; {} cannot be another: a sink ends a stage alone (put the sink in a "
        "stage of its own, after key_by(...).partition(...))",
        stage.name, sink));
  }
}

}  // namespace sluice::dataflow::detail
