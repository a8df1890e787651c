// Recovery selection for a job start: the newest valid checkpoint, every task's state, and the id
// the coordinator continues at (never one already used by any chk-* directory).

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/coordinator.hpp>
#include <sluice/snapshot/recovery_plan.hpp>

#include <support/backends.hpp>
#include <support/checkpoint_files.hpp>
#include <support/fake_participants.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <vector>

using namespace sluice::snapshot;
using sluice::runtime::executor;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::fake_job;
using sluice::test::temp_dir;
using sluice::test::virtual_time;

namespace {

task<std::vector<checkpoint_id>> continue_after(temp_dir* dir, checkpoint_id first) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator_options options;
  options.first_checkpoint_id = first;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  co_await job.register_all(ex);
  for (int i = 0; i < 2; ++i) {
    const auto outcome = co_await c.trigger_now();
    CHECK(outcome.completed());
  }
  co_await c.stop();
  co_await job.remove_all();
  std::vector<checkpoint_id> ids;
  for (const auto& s : c.stats()) ids.push_back(s.id);
  co_return ids;
}

}  // namespace

TEST_CASE("a recovery plan takes the newest valid checkpoint and the coordinator continues after every id seen") {
  temp_dir dir;
  checkpoint_storage storage(dir.file("checkpoints"));
  sluice::test::make_checkpoint(storage, 4);
  sluice::test::make_checkpoint(storage, 5);
  sluice::test::write_bytes(storage.checkpoint_dir(5) + "/_manifest", sluice::test::bytes_of("garbage\n"));  // skipped
  std::filesystem::create_directories(storage.checkpoint_dir(6));  // 6 was cut short by the crash

  const recovery_plan plan = sync_wait(plan_recovery(storage)).value();
  CHECK(plan.recovered_id() == 4);
  CHECK(plan.next_checkpoint_id == 7);
  REQUIRE(plan.skipped.size() == 2);
  CHECK(plan.skipped[0].id == 6);
  CHECK(plan.skipped[1].id == 5);
  REQUIRE(plan.tasks.size() == 2);
  CHECK(plan.tasks.at(1).state_file_path == storage.state_file_path(4, 1));
  CHECK(plan.tasks.at(1).state.operator_state.at(0) == sluice::test::bytes_of("op-1"));
  CHECK(plan.tasks.at(0).state.summary.checkpoint == 4);

  const auto ids = sync_wait(continue_after(&dir, plan.next_checkpoint_id), virtual_time());
  CHECK(ids == std::vector<checkpoint_id>{7, 8});
  // Retention then dropped the damaged and the cut-short directories (older than 8).
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(5)));
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(6)));
  CHECK(std::filesystem::exists(storage.checkpoint_dir(4)));
}

TEST_CASE("a recovery plan over an empty or missing root starts fresh at checkpoint 1") {
  temp_dir dir;
  checkpoint_storage missing(dir.file("nothing-here"));
  const recovery_plan plan = sync_wait(plan_recovery(missing)).value();
  CHECK_FALSE(plan.checkpoint.has_value());
  CHECK(plan.recovered_id() == no_checkpoint);
  CHECK(plan.tasks.empty());
  CHECK(plan.next_checkpoint_id == 1);
}
