// Recovery selection for a job start (see recovery_plan.hpp).

#include <sluice/snapshot/recovery_plan.hpp>

#include <sluice/runtime/log.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <system_error>
#include <utility>

namespace sluice::snapshot {

namespace {

runtime::task<io::result<recovery_plan>> plan(checkpoint_storage* storage, std::map<checkpoint_id, std::string> rejected,
                                              checkpoint_id newest_allowed) {
  auto choice = co_await storage->newest_valid(std::move(rejected), newest_allowed);
  if (!choice) co_return std::move(choice).error();

  recovery_plan out;
  // Only ids that parse (1..max_checkpoint_id) count: a bad name is ignored with id 0. A chk-<id>
  // that is not a directory (a symlink) is ignored too, but its id is taken: it cannot be made.
  checkpoint_id highest = no_checkpoint;
  for (const auto& info : choice->ignored) highest = std::max(highest, info.id);
  for (const auto& info : choice->skipped) highest = std::max(highest, info.id);
  if (choice->chosen) highest = std::max(highest, choice->chosen->id);
  assert(highest <= max_checkpoint_id);
  // A job must be able to run on: fewer than 2^32 ids left (one per millisecond for 50 days) is
  // refused at the start, not found out when the ids run out mid-run.
  constexpr checkpoint_id headroom = checkpoint_id{1} << 32;
  if (highest >= max_checkpoint_id - headroom) {
    co_return io::error(std::make_error_code(std::errc::value_too_large),
                        fmt::format("checkpoint directory '{}': chk-{} leaves fewer than 2^32 checkpoint ids below "
                                    "the largest valid one (2^62); start with a new checkpoint directory",
                                    storage->root(), highest));
  }
  out.next_checkpoint_id = highest + 1;  // cannot wrap: highest < max_checkpoint_id = 2^62
  out.ignored = std::move(choice->ignored);
  out.skipped = std::move(choice->skipped);
  if (!choice->chosen) {
    runtime::log::info("recovery: no valid checkpoint under '{}'; starting fresh at checkpoint {}", storage->root(),
                       out.next_checkpoint_id);
    co_return out;
  }

  const checkpoint_id id = choice->chosen->id;
  auto loaded = co_await storage->load(id);
  if (!loaded) co_return std::move(loaded).error();
  for (auto& state : loaded->tasks) {
    const task_id task = state.summary.task;
    out.tasks.emplace(task, recovered_task{storage->state_file_path(id, task), std::move(state)});
  }
  out.metadata = std::move(loaded->manifest.metadata);
  out.checkpoint = std::move(choice->chosen);
  runtime::log::info("recovery: resuming from checkpoint {} ({} tasks); the next checkpoint is {}", id,
                     out.tasks.size(), out.next_checkpoint_id);
  co_return out;
}

}  // namespace

runtime::task<io::result<recovery_plan>> plan_recovery(checkpoint_storage& storage,
                                                       std::map<checkpoint_id, std::string> rejected,
                                                       checkpoint_id newest_allowed) {
  return plan(&storage, std::move(rejected), newest_allowed);
}

}  // namespace sluice::snapshot
