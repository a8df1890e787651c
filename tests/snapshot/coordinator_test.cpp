// The checkpoint coordinator: completion, aborts, subsumption, stop, statistics and retention, with
// fake tasks (tests/support/fake_participants.hpp) that write real state files under a temp dir.
// Single-executor tests run on the test backend's virtual clock; one runs tasks on a second
// executor of an engine. Timing (interval, min pause) and recovery live in coordinator_timing_test.

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <support/backends.hpp>
#include <support/fake_participants.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
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

// A committed manifest: the coordinator creates `_manifest` empty at the trigger (prepare_checkpoint),
// and an empty one means "never committed".
bool has_manifest(checkpoint_storage& storage, checkpoint_id id) {
  const std::string path = storage.checkpoint_dir(id) + "/_manifest";
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return !ec && size > 0;
}

reply silent_for(checkpoint_id id, checkpoint_id which) {
  reply r;
  if (id == which) r.kind = reply_kind::silent;
  return r;
}

struct midway {
  std::size_t in_flight = 0;
  std::size_t completes_heard = 0;
  bool manifest = false;
  std::size_t barriers_of_fast_tasks = 0;
};

task<midway> look_midway(coordinator* c, fake_job* job) {
  co_await sluice::runtime::sleep_for(100ms);
  midway m;
  m.in_flight = c->in_flight();
  for (std::size_t i = 0; i < job->size(); ++i) m.completes_heard += (*job)[i].completed.size();
  m.manifest = has_manifest(job->storage(), 1);
  m.barriers_of_fast_tasks = (*job)[0].barriers.size() + (*job)[1].barriers.size();
  co_return m;
}

task<void> completes_after_all_acks(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  job.add(*ex, false).policy = [](checkpoint_id) {
    reply r;
    r.delay = 200ms;
    return r;
  };
  co_await job.register_all(ex);
  auto [outcome, seen] = co_await when_all(c.trigger_now(), look_midway(&c, &job));
  co_await c.stop();
  co_await job.remove_all();

  CHECK(seen.in_flight == 1);
  CHECK(seen.completes_heard == 0);
  CHECK_FALSE(seen.manifest);
  CHECK(seen.barriers_of_fast_tasks == 2);

  CHECK(outcome.completed());
  CHECK(outcome.operator_state_bytes == 3 * 4);
  CHECK(outcome.channel_state_bytes == 3 * 5300);
  CHECK(job[0].triggers == std::vector<checkpoint_id>{1});
  CHECK(job[1].triggers.empty());
  for (std::size_t i = 0; i < job.size(); ++i) {
    INFO("task " << i);
    CHECK(job[i].completed == std::vector<checkpoint_id>{1});
    CHECK(job[i].manifest_at_complete == std::vector<bool>{true});
    CHECK(job[i].aborted.empty());
    CHECK_FALSE(job[i].wrong_thread);
  }
  const checkpoint_info info = co_await storage.validate(1);
  CHECK(info.valid);
  CHECK(info.tasks == 3);
  REQUIRE(c.last_completed().has_value());
  CHECK(c.last_completed()->id == 1);
  CHECK(c.last_completed()->duration >= 200ms);
  CHECK(c.last_completed()->duration < 300ms);
}

}  // namespace

TEST_CASE("a checkpoint completes only once every task acknowledged, and its manifest is durable before any task hears complete") {
  temp_dir dir;
  sync_wait(completes_after_all_acks(&dir), virtual_time());
}

namespace {

struct engine_run {
  std::vector<checkpoint_outcome> outcomes;
  std::vector<checkpoint_id> ids;
  std::size_t in_flight_after = 0;
};

task<engine_run> three_checkpoints_across_executors(coordinator* c, fake_job* job) {
  engine_run run;
  co_await job->register_all(executor::current());
  for (int i = 0; i < 3; ++i) {
    auto outcome = co_await c->trigger_now(checkpoint_mode::unaligned);
    run.outcomes.push_back(std::move(outcome));
  }
  co_await c->stop();
  co_await job->remove_all();
  for (const auto& s : c->stats()) run.ids.push_back(s.id);
  run.in_flight_after = c->in_flight();
  co_return run;
}

}  // namespace

TEST_CASE("tasks on another executor take part through posts only, and each hears complete exactly once") {
  temp_dir dir;
  sluice::runtime::engine_options options;
  options.executors = 2;
  options.handle_signals = false;
  sluice::runtime::engine eng(options);
  checkpoint_storage storage(dir.file("checkpoints"));
  coordinator c(eng.at(0), storage);
  fake_job job(c, storage);
  job.add(eng.at(1), true);   // a source on the other executor
  job.add(eng.at(0), false);  // a task sharing the coordinator's executor
  job.add(eng.at(1), false);  // a sink on the other executor
  const engine_run run = eng.block_on(three_checkpoints_across_executors(&c, &job));
  eng.stop();  // joins the executor threads: the tasks' records are ours to read

  REQUIRE(run.outcomes.size() == 3);
  for (const auto& o : run.outcomes) CHECK(o.completed());
  CHECK(run.ids == std::vector<checkpoint_id>{1, 2, 3});
  CHECK(run.in_flight_after == 0);
  CHECK(job[0].triggers == std::vector<checkpoint_id>{1, 2, 3});
  CHECK(job[0].trigger_modes == std::vector<checkpoint_mode>(3, checkpoint_mode::unaligned));
  for (std::size_t i = 0; i < job.size(); ++i) {
    INFO("task " << i);
    CHECK(job[i].completed == std::vector<checkpoint_id>{1, 2, 3});
    CHECK(job[i].manifest_at_complete == std::vector<bool>{true, true, true});
    CHECK(job[i].aborted.empty());
    CHECK_FALSE(job[i].wrong_thread);
  }
}

namespace {

task<void> decline_aborts(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [](checkpoint_id id) {
    reply r;
    if (id == 1) {
      r.kind = reply_kind::decline;
      r.reason = abort_reason::io_error;
      r.detail = "write 'task-1.state': No space left on device";
    }
    return r;
  };
  job.add(*ex, false);
  co_await job.register_all(ex);
  const auto first = co_await c.trigger_now();
  const bool left_behind = std::filesystem::exists(storage.checkpoint_dir(1));
  const auto second = co_await c.trigger_now();
  co_await c.stop();
  co_await job.remove_all();

  CHECK_FALSE(first.completed());
  CHECK(first.reason == abort_reason::io_error);
  CHECK(first.detail.find("task 1 declined checkpoint 1") != std::string::npos);
  CHECK(first.detail.find("No space left on device") != std::string::npos);
  CHECK_FALSE(has_manifest(storage, 1));
  CHECK(left_behind);
  for (std::size_t i = 0; i < job.size(); ++i) {
    INFO("task " << i);
    REQUIRE(job[i].aborted.size() == 1);
    CHECK(job[i].aborted[0].id == 1);
    CHECK(job[i].aborted[0].reason == abort_reason::io_error);
    CHECK(job[i].completed == std::vector<checkpoint_id>{2});
  }
  CHECK(second.completed());
  // Retention after checkpoint 2 removed the aborted directory.
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1)));
  REQUIRE(c.stats().size() == 2);
  CHECK(c.stats()[0].outcome.reason == abort_reason::io_error);
  CHECK(c.stats()[0].acknowledged == 1);  // task 0; task 2's came after the decline
}

}  // namespace

TEST_CASE("a decline aborts the checkpoint, every task hears abort with the reason, and the next one completes") {
  temp_dir dir;
  sync_wait(decline_aborts(&dir), virtual_time());
}

namespace {

task<void> expires(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator_options options;
  options.checkpoint_timeout = 2s;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [](checkpoint_id id) { return silent_for(id, 1); };
  co_await job.register_all(ex);
  const auto started = ex->now();
  const auto outcome = co_await c.trigger_now();
  const auto waited = ex->now() - started;
  co_await c.stop();
  co_await job.remove_all();

  CHECK(outcome.reason == abort_reason::expired);
  CHECK(outcome.detail.find("not acknowledged by task(s) 1") != std::string::npos);
  CHECK(waited >= 2s);
  CHECK(waited < 3s);
  for (std::size_t i = 0; i < job.size(); ++i) {
    REQUIRE(job[i].aborted.size() == 1);
    CHECK(job[i].aborted[0].reason == abort_reason::expired);
    CHECK(job[i].completed.empty());
  }
  CHECK_FALSE(has_manifest(storage, 1));
  CHECK(c.stats().back().outcome.reason == abort_reason::expired);
}

}  // namespace

TEST_CASE("a checkpoint not acknowledged within the timeout expires") {
  temp_dir dir;
  sync_wait(expires(&dir), virtual_time());
}

namespace {

task<void> subsumes(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator_options options;
  options.max_concurrent = 2;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [](checkpoint_id id) { return silent_for(id, 1); };
  co_await job.register_all(ex);
  auto [older, newer] = co_await when_all(c.trigger_now(), c.trigger_now());
  co_await c.stop();
  co_await job.remove_all();

  CHECK(newer.completed());
  CHECK(older.reason == abort_reason::subsumed);
  CHECK(older.detail.find("checkpoint 2 completed first") != std::string::npos);
  CHECK_FALSE(has_manifest(storage, 1));
  CHECK(has_manifest(storage, 2));
  for (std::size_t i = 0; i < job.size(); ++i) {
    CHECK(job[i].completed == std::vector<checkpoint_id>{2});
    REQUIRE(job[i].aborted.size() == 1);
    CHECK(job[i].aborted[0].id == 1);
    CHECK(job[i].aborted[0].reason == abort_reason::subsumed);
  }
  REQUIRE(c.last_completed().has_value());
  CHECK(c.last_completed()->id == 2);
}

}  // namespace

TEST_CASE("a newer checkpoint completing subsumes an older one still pending") {
  temp_dir dir;
  sync_wait(subsumes(&dir), virtual_time());
}

namespace {

task<void> stop_after(coordinator* c, std::chrono::milliseconds delay) {
  co_await sluice::runtime::sleep_for(delay);
  co_await c->stop();
}

task<void> stop_in_flight(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [](checkpoint_id id) { return silent_for(id, 1); };
  co_await job.register_all(ex);
  c.start();  // the periodic loop, too, must end
  auto [outcome, stopped] = co_await when_all(c.trigger_now(), stop_after(&c, 100ms));
  (void)stopped;
  const auto after_stop = co_await c.trigger_now();
  co_await c.stop();  // idempotent
  co_await job.remove_all();

  CHECK(outcome.reason == abort_reason::cancelled);
  CHECK(after_stop.reason == abort_reason::cancelled);
  CHECK(c.in_flight() == 0);
  for (std::size_t i = 0; i < job.size(); ++i) {
    REQUIRE(job[i].aborted.size() == 1);
    CHECK(job[i].aborted[0].reason == abort_reason::cancelled);
  }
  CHECK(c.stats().size() == 1);
}

}  // namespace

TEST_CASE("stop() with a checkpoint in flight returns, aborts it as cancelled and refuses new triggers") {
  temp_dir dir;
  sync_wait(stop_in_flight(&dir), virtual_time());
}

namespace {

task<void> leaves_mid_checkpoint(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  job.add(*ex, false).policy = [](checkpoint_id id) { return silent_for(id, 1); };
  co_await job.register_all(ex);
  struct leaver {
    static task<void> run(coordinator* c) {
      co_await sluice::runtime::sleep_for(100ms);
      co_await c->remove_participant(2, "crashed");
    }
  };
  auto [outcome, left] = co_await when_all(c.trigger_now(), leaver::run(&c));
  (void)left;
  const std::size_t registered = c.participants();
  const auto next = co_await c.trigger_now();
  co_await c.stop();
  co_await job.remove_all();

  CHECK(outcome.reason == abort_reason::coordinator);
  CHECK(outcome.detail.find("task 2 left the job: crashed") != std::string::npos);
  CHECK(registered == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    REQUIRE(job[i].aborted.size() == 1);
    CHECK(job[i].aborted[0].reason == abort_reason::coordinator);
    CHECK(job[i].completed == std::vector<checkpoint_id>{2});
  }
  CHECK(job[2].aborted.empty());  // it left: nothing reaches it any more
  CHECK(job[2].completed.empty());
  CHECK(next.completed());
  const checkpoint_info info = co_await storage.validate(2);
  CHECK(info.valid);
  CHECK(info.tasks == 2);
}

}  // namespace

TEST_CASE("a task that leaves mid-checkpoint aborts it, hears nothing more, and the next checkpoint goes on without it") {
  temp_dir dir;
  sync_wait(leaves_mid_checkpoint(&dir), virtual_time());
}

namespace {

task<void> corrupt_file(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [](checkpoint_id) {
    reply r;
    r.kind = reply_kind::corrupt_ack;
    return r;
  };
  co_await job.register_all(ex);
  const auto outcome = co_await c.trigger_now();
  co_await c.stop();
  co_await job.remove_all();

  CHECK(outcome.reason == abort_reason::io_error);
  CHECK(outcome.detail.find("commit failed") != std::string::npos);
  CHECK(outcome.detail.find("task-1.state") != std::string::npos);
  CHECK_FALSE(has_manifest(storage, 1));
  CHECK_FALSE(std::filesystem::exists(storage.checkpoint_dir(1) + "/_manifest.tmp"));
  for (std::size_t i = 0; i < job.size(); ++i) {
    REQUIRE(job[i].aborted.size() == 1);
    CHECK(job[i].aborted[0].reason == abort_reason::io_error);
    CHECK(job[i].completed.empty());
  }
}

}  // namespace

TEST_CASE("an acknowledged state file that fails validation aborts the checkpoint without a manifest") {
  temp_dir dir;
  sync_wait(corrupt_file(&dir), virtual_time());
}

namespace {

// Task 1 describes its file in the acknowledgement with a CRC32C that is off by one bit.
task<void> commit_policy(temp_dir* dir, bool verify, checkpoint_outcome* outcome, checkpoint_info* info) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator_options options;
  options.verify_state_files = verify;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [](checkpoint_id) {
    reply r;
    r.describe_file = true;
    r.crc_error = 1;
    return r;
  };
  co_await job.register_all(ex);
  *outcome = co_await c.trigger_now();
  co_await c.stop();
  co_await job.remove_all();
  *info = co_await storage.validate(1);
}

}  // namespace

TEST_CASE("the manifest vouches for state files read back by default, and for the writer's description when told to trust it") {
  temp_dir dir;
  checkpoint_outcome outcome;
  checkpoint_info info;
  SECTION("verify_state_files: the coordinator's own reading wins over the acknowledgement") {
    sync_wait(commit_policy(&dir, true, &outcome, &info), virtual_time());
    CHECK(outcome.completed());
    CHECK(info.valid);
  }
  SECTION("trusting the writer: its description goes into the manifest as is") {
    sync_wait(commit_policy(&dir, false, &outcome, &info), virtual_time());
    CHECK(outcome.completed());
    CHECK_FALSE(info.valid);  // recovery would catch the lie, and fall back
    CHECK(info.fault == make_error_code(storage_errc::bad_checksum));
  }
}
