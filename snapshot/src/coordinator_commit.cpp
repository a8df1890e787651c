// The coordinator's commit of checkpoint N (step 3 of the lifecycle in coordinator.hpp), from
// "every task has written its state file" to "completed":
//   - the manifest: each file described (read back and validated, or the writer's description),
//     then written in place and fdatasynced (checkpoint_storage::commit_manifest);
//   - meanwhile, the wait for every task's acknowledgement (its state file's fsync done).
// The two run together, so the manifest's write and sync overlap the tasks' fsyncs. N completes
// only once both are done (then published, with `publish`): every byte recovery reads is durable.
// Until the last acknowledgement, N can still abort (a decline, a task leaving, the timeout,
// stop()); its manifest, if written, is then taken back. A crash before that leaves either a
// manifest whose files fail validation (recovery skips N) or one whose files are all durable.
// (The preparation of chk-N/, which the commit waits for: coordinator_prepare.cpp.)

#include <sluice/snapshot/coordinator.hpp>

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stop_token>
#include <utility>

namespace sluice::snapshot {

runtime::task<bool> coordinator::wait_for(runtime::event* e) { co_return co_await e->wait(); }

std::string coordinator::missing_tasks(const pending_checkpoint& p, bool durable) {
  std::string missing;
  for (const auto& entry : p.tasks) {
    const bool in = durable ? p.acks.contains(entry.first) : p.written.contains(entry.first);
    if (!in) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", entry.first);
  }
  return missing;
}

runtime::task<void> coordinator::commit(checkpoint_id id) {
  pending_checkpoint& p = pending_.at(id);
  auto [written, durable] = co_await runtime::when_all(write_manifest(id), wait_durable(id));
  if (!written) co_return;  // write_manifest set the verdict; storage took the manifest back
  if (!durable) {           // the verdict says why
    co_await withdraw(id);
    co_return;
  }
  if (options_.publish) {
    io::result<void> published = co_await options_.publish(id);
    if (!published) {
      // The manifest stays: recovery never goes beyond the published id.
      fail_commit(p, fmt::format("checkpoint {}: commit failed: publishing: {}", id, published.error().message()));
      co_return;
    }
  }
  p.committed = true;
}

runtime::task<io::result<void>> coordinator::write_manifest(checkpoint_id id) {
  pending_checkpoint& p = pending_.at(id);
  checkpoint_manifest manifest;
  manifest.checkpoint = id;
  manifest.mode = p.mode;
  manifest.metadata = options_.job_metadata;
  std::optional<io::error> failed;
  for (const auto& entry : p.tasks) {
    const task_id task = entry.first;
    // An acknowledgement may be in already (it carries the writer's description).
    auto ack = p.acks.find(task);
    if (!options_.verify_state_files && ack != p.acks.end() && ack->second.state_file) {
      manifest_file file = *ack->second.state_file;
      file.name = state_file_name(task);
      manifest.files.push_back(std::move(file));
      continue;
    }
    // The file holds every byte (the task reported it written): read back, it validates whether or
    // not its fsync has finished.
    auto described = co_await storage_->describe_state_file(id, task);
    if (!described) {
      failed = std::move(described).error();
      break;
    }
    manifest.files.push_back(std::move(described).value());
  }
  io::result<void> committed = io::success();
  if (failed) {
    committed = std::move(*failed);
  } else {
    committed = co_await storage_->commit_manifest(std::move(manifest));
  }
  if (!committed) fail_commit(p, fmt::format("checkpoint {}: commit failed: {}", id, committed.error().message()));
  co_return committed;
}

runtime::task<bool> coordinator::wait_durable(checkpoint_id id) {
  pending_checkpoint& p = pending_.at(id);
  if (!p.verdict && p.acks.size() < p.tasks.size()) {
    const auto left = std::max(std::chrono::nanoseconds(0),
                               std::chrono::nanoseconds(p.triggered_at + options_.checkpoint_timeout - home_->now()));
    const auto acknowledged = co_await runtime::with_timeout(wait_for(&p.durable), left);
    if (!acknowledged.has_value()) {
      request_abort(p, abort_reason::expired,
                    fmt::format("checkpoint {} expired after {} ms; not acknowledged by task(s) {}", id,
                                options_.checkpoint_timeout.count(), missing_tasks(p, true)));
    }
  }
  co_return !p.verdict && p.acks.size() == p.tasks.size();
}

runtime::task<void> coordinator::withdraw(checkpoint_id id) {
  auto withdrawn = co_await storage_->withdraw_manifest(id);
  if (!withdrawn) {
    runtime::log::warn("checkpoint {} (aborted): its manifest could not be taken back: {}", id,
                       withdrawn.error().message());
  }
}

}  // namespace sluice::snapshot
