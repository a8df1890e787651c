// What the runner spawns in its tasks' scope: each task's run, its channels' helpers, the
// controller and the progress reports. Nothing a child throws (out of memory: a frame, a message
// between executors, a buffer) leaves it: the scope's join rethrew it past the job's teardown
// (the transports' close, the tasks' destruction on their own executors), and the runner was then
// destroyed with tasks alive on other executors. A child that throws fails the job instead, naming
// the task, and the teardown runs as after any failure.

#include "runner.hpp"

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/run_on.hpp>
#include <sluice/runtime/when_all.hpp>

#include <fmt/core.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace sluice::dataflow::detail {

namespace {
rt::task<void> join_all(std::vector<rt::task<void>> jobs) { co_await rt::when_all(std::move(jobs)); }
}  // namespace

std::string runner::what_of(std::exception_ptr thrown) noexcept {
  try {
    std::rethrow_exception(std::move(thrown));
  } catch (const std::exception& e) {
    try {
      return e.what();
    } catch (...) {
    }
  } catch (...) {
  }
  return std::string();  // (empty: fail_job says what it can)
}

void runner::fail_job(std::string why) {
  if (why.empty()) why = "out of memory";
  if (!failure_ && !final_checkpoint_done_) {
    failure_ = std::move(why);
    runtime::log::error("job {}: {}", job_.name(), *failure_);
    if (link_ != nullptr) link_->failed(*failure_);
  } else {
    runtime::log::error("job {}: also: {}", job_.name(), why);
  }
  tasks_scope_.request_stop();
  all_data_ended_.set();  // wakes the controller, which sees the failure
}

rt::task<void> runner::run_task(task_slot* slot) {
  std::exception_ptr thrown;
  try {
    co_await rt::run_on(slot->executor, slot->task->run());
  } catch (...) {
    thrown = std::current_exception();
  }
  if (!thrown) co_return;
  const std::string why = fmt::format("task {}: {}", slot->task->name(), what_of(thrown));
  // A task that threw before its report (the report's own message could not be allocated) ends here.
  if (!slots_[slot->id].ended) task_ended(slot->id, why);
  fail_job(why);
}

// The partition's flusher and senders, and the gate's credit pump: they end with the data.
rt::task<void> runner::run_helpers(task_slot* slot) {
  std::exception_ptr thrown;
  try {
    std::vector<rt::task<void>> jobs;
    if (slot->partition) jobs.push_back(slot->partition->run_flusher());
    for (auto& s : slot->senders) jobs.push_back(s->sender().run());
    if (slot->pump) jobs.push_back(slot->pump->run());
    co_await rt::run_on(slot->executor, join_all(std::move(jobs)));
  } catch (...) {
    thrown = std::current_exception();
  }
  if (thrown) fail_job(fmt::format("task {} (its channels): {}", slot->task->name(), what_of(thrown)));
}

rt::task<void> runner::guarded(rt::task<void> body, const char* what) {
  std::exception_ptr thrown;
  try {
    co_await std::move(body);
  } catch (...) {
    thrown = std::current_exception();
  }
  if (thrown) fail_job(fmt::format("the job's {}: {}", what, what_of(thrown)));
}

bool runner::owns_parts() const noexcept {
  if (wiring_ && !wiring_closed_) return true;
  for (const task_slot* s : mine_) {
    if (s->task || s->partition || s->gate || s->pump || s->in_pool || s->out_pool || s->priority_pool ||
        !s->senders.empty()) {
      return true;
    }
  }
  return false;
}

}  // namespace sluice::dataflow::detail
