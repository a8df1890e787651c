// The checkpoint coordinator over time (virtual clock): periodic triggers, min pause, "not ready"
// declines, the max_concurrent slot, the bounded statistics history and retention.

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/snapshot/coordinator.hpp>

#include <support/backends.hpp>
#include <support/fake_participants.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace sluice::snapshot;
using namespace std::chrono_literals;
using sluice::runtime::executor;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::fake_job;
using sluice::test::reply;
using sluice::test::reply_kind;
using sluice::test::temp_dir;
using sluice::test::virtual_time;

namespace {

using ms = std::chrono::milliseconds;

// When each checkpoint was triggered and ended, in virtual ms after start(), with its outcome.
struct periodic_record {
  std::vector<long> triggered_ms;
  std::vector<long> ended_ms;
  std::vector<checkpoint_id> ids;
  std::vector<checkpoint_outcome> outcomes;
};

task<periodic_record> run_periodic(temp_dir* dir, coordinator_options options, ms ack_delay, ms run_for,
                                   checkpoint_id not_ready_id) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [ack_delay, not_ready_id](checkpoint_id id) {
    reply r;
    r.delay = ack_delay;
    if (id == not_ready_id) {
      r.kind = reply_kind::decline;
      r.reason = abort_reason::not_ready;
      r.detail = "still replaying recovered channel state";
    }
    return r;
  };
  co_await job.register_all(ex);
  const auto origin = ex->now();
  c.start();
  co_await sluice::runtime::sleep_for(run_for);
  co_await c.stop();
  co_await job.remove_all();

  periodic_record out;
  for (const auto& s : c.stats()) {
    out.ids.push_back(s.id);
    out.triggered_ms.push_back(std::chrono::duration_cast<ms>(s.triggered_at - origin).count());
    out.ended_ms.push_back(std::chrono::duration_cast<ms>(s.triggered_at + s.duration - origin).count());
    out.outcomes.push_back(s.outcome);
  }
  co_return out;
}

}  // namespace

TEST_CASE("periodic checkpoints are triggered every interval when they end quickly") {
  temp_dir dir;
  coordinator_options options;
  options.interval = 1s;
  options.min_pause = 500ms;
  const auto r = sync_wait(run_periodic(&dir, options, 200ms, 4500ms, no_checkpoint), virtual_time());
  CHECK(r.ids == std::vector<checkpoint_id>{1, 2, 3, 4});
  CHECK(r.triggered_ms == std::vector<long>{1000, 2000, 3000, 4000});
  CHECK(r.ended_ms == std::vector<long>{1200, 2200, 3200, 4200});
  for (const auto& o : r.outcomes) CHECK(o.completed());
}

TEST_CASE("the min pause separates the end of one checkpoint from the next trigger") {
  temp_dir dir;
  coordinator_options options;
  options.interval = 1s;
  options.min_pause = 500ms;
  // Each checkpoint takes 800 ms: the next trigger waits for end + 500 ms, past the interval.
  const auto r = sync_wait(run_periodic(&dir, options, 800ms, 5500ms, no_checkpoint), virtual_time());
  CHECK(r.ids == std::vector<checkpoint_id>{1, 2, 3, 4});
  CHECK(r.triggered_ms == std::vector<long>{1000, 2300, 3600, 4900});
  REQUIRE(r.outcomes.size() == 4);
  CHECK(r.outcomes[2].completed());
  CHECK(r.outcomes[3].reason == abort_reason::cancelled);  // in flight at stop()
  for (std::size_t i = 0; i + 1 < r.ids.size(); ++i) {
    CHECK(r.triggered_ms[i + 1] - r.ended_ms[i] >= 500);
    CHECK(r.triggered_ms[i + 1] - r.triggered_ms[i] >= 1000);
  }
}

TEST_CASE("a task that is not ready declines, the checkpoint aborts, and the next periodic one completes") {
  temp_dir dir;
  coordinator_options options;
  options.interval = 1s;
  const auto r = sync_wait(run_periodic(&dir, options, 0ms, 2500ms, 1), virtual_time());
  CHECK(r.ids == std::vector<checkpoint_id>{1, 2});
  CHECK(r.triggered_ms == std::vector<long>{1000, 2000});
  REQUIRE(r.outcomes.size() == 2);
  CHECK(r.outcomes[0].reason == abort_reason::not_ready);
  CHECK(r.outcomes[0].detail.find("still replaying recovered channel state") != std::string::npos);
  CHECK(r.outcomes[1].completed());
}

namespace {

task<void> bounded_history(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator_options options;
  options.history_size = 3;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  job.add(*ex, false).policy = [](checkpoint_id id) {
    reply r;
    r.delay = 50ms;
    if (id == 5) {
      r.kind = reply_kind::decline;
      r.detail = "operator refused";
    }
    return r;
  };
  co_await job.register_all(ex);
  for (int i = 0; i < 5; ++i) {
    const auto outcome = co_await c.trigger_now(checkpoint_mode::unaligned);
    (void)outcome;
  }
  co_await c.stop();
  co_await job.remove_all();

  const auto& history = c.stats();
  REQUIRE(history.size() == 3);
  CHECK(history[0].id == 3);
  CHECK(history[1].id == 4);
  CHECK(history[2].id == 5);
  for (std::size_t i = 0; i < 2; ++i) {
    const checkpoint_stats& s = history[i];
    CHECK(s.mode == checkpoint_mode::unaligned);
    CHECK(s.outcome.completed());
    CHECK(s.tasks == 3);
    CHECK(s.acknowledged == 3);
    CHECK(s.operator_state_bytes == 12);
    CHECK(s.channel_state_bytes == 3 * 5300);
    CHECK(s.max_alignment_duration == 3ms);  // task 2 reports 3 ms
    CHECK(s.duration == 50ms);
    CHECK(s.triggered_unix_ms > 0);
  }
  CHECK(history[2].outcome.reason == abort_reason::declined);
  CHECK(history[2].acknowledged == 2);
  REQUIRE(c.last_completed().has_value());
  CHECK(c.last_completed()->id == 4);
  CHECK(c.next_checkpoint_id() == 6);
}

}  // namespace

TEST_CASE("the statistics history keeps the last N checkpoints, each with its totals and outcome") {
  temp_dir dir;
  sync_wait(bounded_history(&dir), virtual_time());
}

namespace {

task<std::vector<checkpoint_stats>> two_at_once(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator c(*ex, storage);  // max_concurrent 1
  fake_job job(c, storage);
  job.add(*ex, true).policy = [](checkpoint_id) {
    reply r;
    r.delay = 100ms;
    return r;
  };
  co_await job.register_all(ex);
  auto [first, second] = co_await sluice::runtime::when_all(c.trigger_now(), c.trigger_now());
  CHECK(first.completed());
  CHECK(second.completed());
  co_await c.stop();
  co_await job.remove_all();
  co_return std::vector<checkpoint_stats>(c.stats().begin(), c.stats().end());
}

}  // namespace

TEST_CASE("trigger_now waits for a free slot: at most max_concurrent checkpoints are in flight") {
  temp_dir dir;
  const auto stats = sync_wait(two_at_once(&dir), virtual_time());
  REQUIRE(stats.size() == 2);
  CHECK(stats[0].id == 1);
  CHECK(stats[1].id == 2);
  CHECK(stats[1].triggered_at >= stats[0].triggered_at + stats[0].duration);
}

namespace {

task<void> keeps_k(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"), storage_options{2});
  coordinator c(*ex, storage);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  co_await job.register_all(ex);
  for (int i = 0; i < 4; ++i) {
    const auto outcome = co_await c.trigger_now();
    CHECK(outcome.completed());
  }
  co_await c.stop();
  co_await job.remove_all();
}

std::vector<std::string> entries(const std::string& path) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("retention after each completed checkpoint keeps the newest K") {
  temp_dir dir;
  sync_wait(keeps_k(&dir), virtual_time());
  CHECK(entries(dir.file("checkpoints")) == std::vector<std::string>{"chk-3", "chk-4"});
}

namespace {

// Periodic checkpoints every second; at 2.5 s stop_periodic() and, at 3.2 s, a trigger_now (a
// job's last checkpoint); then 3 s more of nothing.
task<std::vector<checkpoint_stats>> last_checkpoint_after_stop_periodic(temp_dir* dir) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"));
  coordinator_options options;
  options.interval = 1s;
  options.min_pause = 0ms;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false).policy = [](checkpoint_id) {
    reply r;
    r.delay = 100ms;
    return r;
  };
  co_await job.register_all(ex);
  c.start();
  co_await sluice::runtime::sleep_for(2500ms);
  c.stop_periodic();
  co_await sluice::runtime::sleep_for(700ms);
  const checkpoint_outcome last = co_await c.trigger_now();
  CHECK(last.completed());
  co_await sluice::runtime::sleep_for(3s);
  co_await c.stop();
  co_await job.remove_all();
  co_return std::vector<checkpoint_stats>(c.stats().begin(), c.stats().end());
}

}  // namespace

TEST_CASE("after stop_periodic no periodic checkpoint follows, and trigger_now still takes one") {
  temp_dir dir;
  const auto stats = sync_wait(last_checkpoint_after_stop_periodic(&dir), virtual_time());
  REQUIRE(stats.size() == 3);  // periodic 1 and 2, then the last
  for (const checkpoint_stats& s : stats) CHECK(s.outcome.completed());
  CHECK(stats.back().id == 3);
}

namespace {

struct ahead_seen {
  std::vector<std::string> after_first;   // the root once checkpoint 1 ended
  std::vector<std::string> chk2_names;    // chk-2/ then, before its trigger
  std::vector<std::string> after_join;    // the root once checkpoint 3 (after a task joined) ended
  std::vector<checkpoint_stats> stats;
};

// Periodic checkpoints every second. When one ends, the next one's directory is made and prepared
// for the tasks registered then; a task joining in between makes the trigger prepare the names
// the directory lacks; stop() removes the directory prepared for a checkpoint that never came.
task<void> prepared_ahead(temp_dir* dir, ahead_seen* seen) {
  executor* ex = executor::current();
  checkpoint_storage storage(dir->file("checkpoints"), storage_options{.retained_checkpoints = 10});
  coordinator_options options;
  options.interval = 1s;
  options.min_pause = 0ms;
  coordinator c(*ex, storage, options);
  fake_job job(c, storage);
  job.add(*ex, true);
  job.add(*ex, false);
  co_await job.register_all(ex);
  c.start();
  co_await sluice::runtime::sleep_for(1500ms);  // checkpoint 1 at 1 s
  seen->after_first = entries(dir->file("checkpoints"));
  seen->chk2_names = entries(dir->file("checkpoints/chk-2"));
  co_await sluice::runtime::sleep_for(1000ms);  // checkpoint 2 at 2 s
  c.add_participant(job.add(*ex, false));       // chk-3/ was prepared for two tasks
  co_await sluice::runtime::sleep_for(1000ms);  // checkpoint 3 at 3 s, for three
  seen->after_join = entries(dir->file("checkpoints"));
  co_await c.stop();
  co_await job.remove_all();
  seen->stats.assign(c.stats().begin(), c.stats().end());
}

}  // namespace

TEST_CASE("periodic checkpoints prepare the next one's directory ahead, and stop() removes one left unused") {
  temp_dir dir;
  ahead_seen seen;
  sync_wait(prepared_ahead(&dir, &seen), virtual_time());
  CHECK(seen.after_first == std::vector<std::string>{"chk-1", "chk-2"});
  // Ready before its trigger: sluice's marker, the manifest's name and each task's state file, empty.
  CHECK(seen.chk2_names ==
        std::vector<std::string>{".sluice-checkpoint", "_manifest", "task-0.state", "task-1.state"});
  CHECK(seen.after_join == std::vector<std::string>{"chk-1", "chk-2", "chk-3", "chk-4"});
  REQUIRE(seen.stats.size() == 3);
  for (const checkpoint_stats& s : seen.stats) CHECK(s.outcome.completed());
  CHECK(seen.stats.back().tasks == 3);
  // chk-4, prepared when checkpoint 3 ended, never ran: gone.
  CHECK(entries(dir.file("checkpoints")) == std::vector<std::string>{"chk-1", "chk-2", "chk-3"});
}
