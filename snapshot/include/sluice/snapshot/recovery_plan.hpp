#pragma once
// recovery_plan: what a job starting up resumes from (docs/design.md "Recovery", invariant 7), and the
// id its coordinator continues at.
//
// plan_recovery(storage) takes the newest checkpoint that validates end to end (older ones are the
// fallback; each newer one skipped is logged with its reason) and loads every task's state from
// it. next_checkpoint_id is one above the highest id of ANY chk-* directory, valid or not, so an id
// is never reused even for a checkpoint that was aborted or cut short by the crash. (The skipped
// list already holds every directory newer than the chosen one, so no second listing is needed;
// retention never removes the newest directory.) A `chk-*` entry whose name is not a valid id
// (checkpoint_storage.hpp) never counts: it is in `ignored`, logged with its reason. At
// chk-<max_checkpoint_id> there is no next id: the plan fails instead of wrapping.
//
//   auto plan = (co_await plan_recovery(storage)).value();
//   coordinator_options o;  o.first_checkpoint_id = plan.next_checkpoint_id;
//   for (auto& [task, t] : plan.tasks) restore(task, std::move(t.state));

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>
#include <sluice/snapshot/state_file_reader.hpp>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::snapshot {

struct recovered_task {
  std::string state_file_path;  // <root>/chk-<id>/task-<t>.state
  task_state state;             // validated and parsed
};

struct recovery_plan {
  std::optional<checkpoint_info> checkpoint;  // none: a fresh start
  std::vector<checkpoint_info> skipped;       // newer directories that did not validate, newest first
  std::vector<checkpoint_info> ignored;       // `chk-*` entries whose name is not a valid id
  std::map<task_id, recovered_task> tasks;    // empty on a fresh start
  std::map<std::string, std::vector<std::byte>> metadata;  // the manifest's job metadata
  checkpoint_id next_checkpoint_id = 1;

  checkpoint_id recovered_id() const noexcept { return checkpoint ? checkpoint->id : no_checkpoint; }
};

// Fails only if <root> cannot be listed or the chosen checkpoint cannot be loaded back. `storage`
// must outlive the task.
// Checkpoints in `rejected` (valid on disk, but they did not restore: the reason) are skipped too.
// Checkpoints above `newest_allowed` are skipped unread (checkpoint_storage::newest_valid).
runtime::task<io::result<recovery_plan>> plan_recovery(checkpoint_storage& storage,
                                                       std::map<checkpoint_id, std::string> rejected = {},
                                                       checkpoint_id newest_allowed = max_checkpoint_id);

}  // namespace sluice::snapshot
