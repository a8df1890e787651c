// The coordinator's commit overlapping the tasks' fsyncs (coordinator_commit.cpp): the manifest is
// written once every task reported its state file written, while their fsyncs run; the checkpoint
// completes only once every task acknowledged (durable) as well. A crash in between leaves a
// checkpoint recovery skips; an abort in between takes the manifest back.

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <support/backends.hpp>
#include <support/fake_participants.hpp>
#include <support/state_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using namespace std::chrono_literals;
using sluice::runtime::executor;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::runtime::when_all;
using sluice::test::fake_job;
using sluice::test::reply;
using sluice::test::reply_kind;
using sluice::test::temp_dir;
using sluice::test::virtual_time;

namespace {

std::uintmax_t manifest_size(checkpoint_storage& storage, checkpoint_id id) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(storage.checkpoint_dir(id) + "/_manifest", ec);
  return ec ? 0 : size;
}

bool manifest_exists(checkpoint_storage& storage, checkpoint_id id) {
  return std::filesystem::exists(storage.checkpoint_dir(id) + "/_manifest");
}

// Checkpoint 2: every task writes its file and reports it written at once; task 2's fsync takes
// 200 ms, then it answers `last` (checkpoint 1 is acknowledged at once by everyone).
void slow_durable_on_2(fake_job& job, reply_kind last) {
  for (std::size_t i = 0; i < job.size(); ++i) {
    job[i].policy = [i, last](checkpoint_id id) {
      reply r;
      if (id != 2) return r;
      r.written_first = true;
      if (i == 2) {
        r.kind = last;
        r.reason = abort_reason::io_error;
        r.detail = "fsync 'task-2.state': Input/output error";
        r.delay = 200ms;
      }
      return r;
    };
  }
}

struct midway {
  std::uintmax_t manifest_bytes = 0;
  std::size_t completes_heard = 0;
  std::uint64_t completed_count = 0;
  std::size_t in_flight = 0;
};

// 100 ms into checkpoint 2: what the job shows, and a crash image of the checkpoint root in which
// task 2's state file is as a crash before its fsync may leave it (`cut`: its first half; else
// empty, as prepare made it durable).
task<midway> look_midway(coordinator* c, fake_job* job, std::string image, std::optional<bool> cut) {
  co_await sluice::runtime::sleep_for(100ms);
  midway m;
  m.manifest_bytes = manifest_size(job->storage(), 2);
  for (std::size_t i = 0; i < job->size(); ++i) m.completes_heard += (*job)[i].completed.size();
  m.completed_count = c->completed_count();
  m.in_flight = c->in_flight();
  if (cut) {
    std::filesystem::copy(job->storage().root(), image, std::filesystem::copy_options::recursive);
    const std::string state = checkpoint_storage(image).state_file_path(2, 2);
    const auto bytes = sluice::test::sample_task_file(2, 2);
    const std::size_t kept = *cut ? bytes.size() / 2 : 0;
    sluice::test::write_bytes(state, std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(kept)));
  }
  co_return m;
}

task<void> overlaps(temp_dir* dir, bool cut) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  job.add(*ex, false);
  slow_durable_on_2(job, reply_kind::ack);
  co_await job.register_all(ex);
  const checkpoint_outcome first = co_await c.trigger_now();
  const std::string image = dir->file("crash-image");
  auto [second, seen] = co_await when_all(c.trigger_now(), look_midway(&c, &job, image, cut));
  const auto duration = c.last_completed() ? c.last_completed()->duration : 0ns;
  co_await c.stop();
  co_await job.remove_all();

  REQUIRE(first.completed());
  // Midway: the manifest is written while task 2's state file is still syncing, and nothing has
  // completed.
  CHECK(seen.manifest_bytes > 0);
  CHECK(seen.in_flight == 1);
  CHECK(seen.completed_count == 1);
  CHECK(seen.completes_heard == 3);  // checkpoint 1's only
  // Then it completes, only after the last acknowledgement.
  CHECK(second.completed());
  CHECK(duration >= 200ms);
  for (std::size_t i = 0; i < job.size(); ++i) CHECK(job[i].completed == std::vector<checkpoint_id>{1, 2});
  const checkpoint_info info = co_await storage.validate(2);
  CHECK(info.valid);

  // A crash at that moment: recovery does not take checkpoint 2, it resumes from checkpoint 1.
  checkpoint_storage crashed(image);
  auto choice = co_await crashed.newest_valid();
  REQUIRE(static_cast<bool>(choice));
  REQUIRE(choice->chosen.has_value());
  CHECK(choice->chosen->id == 1);
  REQUIRE(choice->skipped.size() == 1);
  CHECK(choice->skipped[0].id == 2);
  CHECK(choice->skipped[0].has_manifest);
}

}  // namespace

TEST_CASE("the manifest is written while a task's state file syncs, and the checkpoint completes only after its acknowledgement") {
  temp_dir dir;
  SECTION("a crash then, the state file still empty, is not recovered from") { sync_wait(overlaps(&dir, false), virtual_time()); }
  SECTION("a crash then, the state file cut short, is not recovered from") { sync_wait(overlaps(&dir, true), virtual_time()); }
}

namespace {

// Checkpoint 2's manifest is written (every task reported written), then task 2's state file does
// not become durable: `how` ends it (a decline, silence until the timeout, or stop()).
enum class ending { decline, expiry, stop };

task<midway> look_then_stop(coordinator* c, fake_job* job) {
  midway got = co_await look_midway(c, job, "", std::nullopt);
  co_await c->stop();
  co_return got;
}

task<void> aborts_after_manifest(temp_dir* dir, ending how) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator_options options;
  options.checkpoint_timeout = 1s;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  job.add(*ex, false);
  slow_durable_on_2(job, how == ending::decline ? reply_kind::decline : reply_kind::silent);
  co_await job.register_all(ex);
  const checkpoint_outcome first = co_await c.trigger_now();
  checkpoint_outcome second;
  midway seen;
  if (how == ending::stop) {
    auto [outcome, m] = co_await when_all(c.trigger_now(), look_then_stop(&c, &job));
    second = std::move(outcome);
    seen = m;
  } else {
    auto [outcome, m] = co_await when_all(c.trigger_now(), look_midway(&c, &job, "", std::nullopt));
    second = std::move(outcome);
    seen = m;
  }
  co_await c.stop();
  co_await job.remove_all();

  REQUIRE(first.completed());
  CHECK(seen.manifest_bytes > 0);  // written before the abort
  CHECK_FALSE(second.completed());
  INFO(second.detail);
  switch (how) {
    case ending::decline:
      CHECK(second.reason == abort_reason::io_error);
      CHECK(second.detail.find("task 2 declined checkpoint 2") != std::string::npos);
      break;
    case ending::expiry:
      CHECK(second.reason == abort_reason::expired);
      CHECK(second.detail.find("not acknowledged by task(s) 2") != std::string::npos);
      break;
    case ending::stop:
      CHECK(second.reason == abort_reason::cancelled);
      break;
  }
  // The manifest was taken back; no task heard complete(2); recovery resumes from checkpoint 1.
  CHECK_FALSE(manifest_exists(storage, 2));
  for (std::size_t i = 0; i < job.size(); ++i) CHECK(job[i].completed == std::vector<checkpoint_id>{1});
  CHECK(c.completed_count() == 1);
  auto choice = co_await storage.newest_valid();
  REQUIRE(static_cast<bool>(choice));
  REQUIRE(choice->chosen.has_value());
  CHECK(choice->chosen->id == 1);
}

}  // namespace

TEST_CASE("a state file that does not become durable after the manifest was written aborts the checkpoint and takes the manifest back") {
  temp_dir dir;
  SECTION("its fsync fails: the task declines") { sync_wait(aborts_after_manifest(&dir, ending::decline), virtual_time()); }
  SECTION("no acknowledgement within the checkpoint timeout") { sync_wait(aborts_after_manifest(&dir, ending::expiry), virtual_time()); }
  SECTION("stop() while it syncs") { sync_wait(aborts_after_manifest(&dir, ending::stop), virtual_time()); }
}
