// See job_samples.hpp.

#include "job_samples.hpp"

#include <sluice/runtime/run_on.hpp>

#include <fmt/format.h>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;

namespace {

rt::task<void> sample_task(const task_slot* slot, task_sample* out) {
  out->id = slot->id;
  out->stage = slot->stage;
  out->subtask = slot->subtask;
  out->executor = slot->executor_index;
  const stream_task* t = slot->task.get();
  if (t == nullptr) co_return;
  out->present = true;
  out->name = t->name();
  out->now = slot->executor->now();
  out->source = t->is_source();
  out->records_in = t->records_in();
  out->records_out = t->records_out();
  out->bytes_in = t->meters().bytes_in;
  out->backpressured_s = seconds(t->meters().backpressure.total(out->now));
  out->backpressured_now = t->meters().backpressure.waiting();
  out->idle_s = seconds(t->meters().idle.total(out->now));
  out->watermark = t->watermark();
  if (slot->partition) {
    out->has_partition = true;
    out->bytes_out = slot->partition->data_bytes();
  }
  if (slot->out_pool) out->output_in_use = slot->out_pool->in_use();
  if (slot->priority_pool) out->priority_in_use = slot->priority_pool->in_use();
  if (slot->in_pool) out->input_in_use = slot->in_pool->in_use();
  if (slot->gate) {
    out->has_gate = true;
    for (std::uint32_t c = 0; c < slot->gate->channels(); ++c) out->credits_outstanding += slot->gate->announced_unused(c);
  }
}

rt::task<void> sample_executor(rt::executor* ex, buffers::network_memory* memory, std::size_t index,
                               executor_sample* out) {
  out->now = ex->now();
  out->counters = ex->backend().counters();
  out->backend = ex->backend().name();
  out->in_flight = ex->backend().outstanding();
  out->inbox = ex->inbox_depth();
  if (memory != nullptr && index < memory->executors()) {
    out->segments_total = memory->pool(index).total_segments();
    out->segments_free = memory->pool(index).free_segments();
  }
  co_return;
}

}  // namespace

double seconds(std::chrono::nanoseconds d) noexcept { return static_cast<double>(d.count()) / 1e9; }

rt::task<std::vector<task_sample>> sample_tasks(const std::vector<task_slot*>& tasks) {
  std::vector<task_sample> out(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) co_await rt::run_on(tasks[i]->executor, sample_task(tasks[i], &out[i]));
  co_return out;
}

rt::task<std::vector<executor_sample>> sample_executors(rt::engine& eng, buffers::network_memory* memory) {
  std::vector<executor_sample> out(eng.size());
  for (std::size_t e = 0; e < out.size(); ++e) {
    rt::executor* ex = &eng.at(e);
    co_await rt::run_on(ex, sample_executor(ex, memory, e, &out[e]));
  }
  co_return out;
}

void rate_meter::start(std::chrono::steady_clock::time_point at, double total) noexcept {
  started_ = true;
  at_ = at;
  base_ = total;
}

double rate_meter::update(std::chrono::steady_clock::time_point now, double total) noexcept {
  if (!started_) {
    started_ = true;
    at_ = now;
    base_ = total;
    return 0;
  }
  const auto wall = now - at_;
  if (wall <= std::chrono::nanoseconds(0)) return full_ ? rate_ : 0;
  const double partial = (total - base_) / seconds(wall);
  if (wall >= window) {
    at_ = now;
    base_ = total;
    rate_ = partial;
    full_ = true;
    return partial;
  }
  return full_ ? rate_ : partial;
}

}  // namespace sluice::dataflow::detail
