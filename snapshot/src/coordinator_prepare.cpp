// The coordinator's checkpoint directories (step 1 of the lifecycle in coordinator.hpp): chk-N/
// made and prepared (its names created empty, it and the root fsynced) at the trigger, or ahead of
// it for periodic checkpoints.
//
// Why ahead: at the trigger, a mkdir (an io_uring op punted to a kernel worker, about 0.1-0.3 ms
// on the 2-core VMs) delayed every source's snapshot, and the preparation's creates and directory
// fsyncs then ran while each task created its own state file in the same directory, contending
// with them. Prepared when the previous checkpoint ends, the directory is ready and durable, and
// every task's file is there (the task's open finds it).

#include <sluice/snapshot/coordinator.hpp>

#include <sluice/runtime/log.hpp>

#include <fmt/format.h>

#include <stop_token>
#include <system_error>
#include <utility>

namespace sluice::snapshot {

runtime::task<void> coordinator::prepare(checkpoint_storage* storage, checkpoint_id id, std::vector<task_id> tasks,
                                         std::shared_ptr<preparation> into, bool make_dir) {
  if (make_dir) {
    auto made = co_await runtime::with_stop_token(storage->create_checkpoint_dir(id), std::stop_token{});
    if (!made) {
      into->failure = std::move(made).error();
      into->done.set();
      co_return;
    }
  }
  auto prepared = co_await runtime::with_stop_token(storage->prepare_checkpoint(id, std::move(tasks)), std::stop_token{});
  if (!prepared) into->failure = std::move(prepared).error();
  into->done.set();
}

runtime::task<void> coordinator::await_prepared(std::shared_ptr<preparation> p) {
  while (!p->done.is_set()) {
    const bool woken = co_await runtime::with_stop_token(wait_for(&p->done), std::stop_token{});
    (void)woken;
  }
}

runtime::task<void> coordinator::open_dir(pending_checkpoint& p) {
  std::vector<task_id> task_ids;
  for (const auto& entry : p.tasks) task_ids.push_back(entry.first);
  bool made_ahead = false;
  if (ahead_ && ahead_->id == p.id) {
    prepared_ahead ahead = std::move(*ahead_);
    ahead_.reset();
    if (!ahead.prepared->done.is_set()) co_await await_prepared(ahead.prepared);
    if (!ahead.prepared->failure && ahead.tasks == task_ids) {
      p.prepared = std::move(ahead.prepared);
      co_return;
    }
    // Another task set (or it failed): prepare below, for these tasks; the directory may exist.
    made_ahead = true;
  }
  ahead_.reset();  // one for an id no checkpoint will use: retention removes it (uncommitted, older)
  auto made = co_await storage_->create_checkpoint_dir(p.id);
  if (!made && !(made_ahead && made.error().code() == std::errc::file_exists)) {
    request_abort(p, abort_reason::io_error, fmt::format("checkpoint {}: {}", p.id, made.error().message()));
    co_return;
  }
  // Off the critical path: the directory entries the commit needs, made durable while the tasks
  // snapshot. The commit waits for this.
  p.prepared = std::make_shared<preparation>();
  scope_.spawn(prepare(storage_, p.id, std::move(task_ids), p.prepared, false));
}

void coordinator::prepare_ahead() {
  if (!started_ || periodic_stopped_ || stopping_ || options_.reserve_ids || ahead_ || participants_.empty()) return;
  if (pending_.contains(next_id_)) return;
  prepared_ahead ahead;
  ahead.id = next_id_;
  for (const auto& entry : participants_) ahead.tasks.push_back(entry.first);
  ahead.prepared = std::make_shared<preparation>();
  scope_.spawn(prepare(storage_, ahead.id, ahead.tasks, ahead.prepared, true));
  ahead_ = std::move(ahead);
}

runtime::task<void> coordinator::discard_ahead() {
  if (!ahead_) co_return;
  prepared_ahead ahead = std::move(*ahead_);
  ahead_.reset();
  if (!ahead.prepared->done.is_set()) co_await await_prepared(ahead.prepared);
  auto removed = co_await runtime::with_stop_token(storage_->discard_unused(ahead.id, std::move(ahead.tasks)),
                                                   std::stop_token{});
  if (!removed) {
    runtime::log::warn("checkpoint coordinator: chk-{}, prepared ahead and unused, could not be removed: {}", ahead.id,
                       removed.error().message());
  }
}

}  // namespace sluice::snapshot
