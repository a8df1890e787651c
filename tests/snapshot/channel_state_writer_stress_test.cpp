// A randomised stress of the channel-state writer's lifecycle: per seed, random orders of start,
// abort, add, finish, result, I/O completions and injected failures (ENOSPC, EIO, short and stuck
// writes), then close. Checked throughout and at the end:
// - nothing throws out of the writer's calls (any exception fails the test);
// - every buffer handed over is recycled exactly once (pool counters);
// - the writer tracks a bounded number of checkpoints;
// - result(id) always resolves, for every id, and a completed checkpoint's file holds exactly the
//   records that were accepted for it, in order.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>

#include <snapshot/writer_support.hpp>
#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <cerrno>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::snapshot;
using buffers::local_buffer_pool;
using buffers::network_memory;
using runtime::io_op;
using runtime::op_code;
using runtime::sync_wait;
using runtime::task;
using runtime::test_backend;

namespace {

constexpr task_id test_task = 1;
constexpr std::size_t segment_bytes = 4096;
constexpr std::size_t pool_segments = 48;
constexpr std::size_t max_waiters = 40;

struct model_record {
  record_type type;
  std::uint16_t group;
  std::uint32_t index;
  std::vector<std::byte> payload;
};

struct waiter_slot {
  checkpoint_id id = no_checkpoint;
  std::optional<checkpoint_outcome> outcome;
};

task<void> wait_into(channel_state_writer* writer, waiter_slot* slot) { slot->outcome = co_await writer->result(slot->id); }

struct stress_run {
  std::uint32_t seed;
  std::string root;
  test_backend* backend;  // null: a real io_uring run (no injected faults, no hand-driven I/O)
  std::map<checkpoint_id, std::vector<model_record>> accepted;  // records accepted per id
  std::map<checkpoint_id, checkpoint_outcome> completed;
  std::uint64_t handed = 0;
};

std::string chk_dir(const stress_run& run, checkpoint_id id) { return run.root + "/chk-" + std::to_string(id); }

abort_reason random_reason(std::mt19937& rng) {
  constexpr abort_reason reasons[] = {abort_reason::declined, abort_reason::expired, abort_reason::coordinator,
                                      abort_reason::cancelled_by_barrier};
  return reasons[rng() % 4];
}

// Completes one pending operation of the writer: mostly for real, sometimes short, failed or stuck.
void complete_one(test_backend& backend, std::mt19937& rng) {
  std::vector<io_op*> ops;
  for (io_op* op : backend.pending()) {
    if (!op->internal) ops.push_back(op);
  }
  if (ops.empty()) return;
  io_op& op = *ops[rng() % ops.size()];
  const unsigned dice = rng() % 100;
  if (op.code == op_code::write && dice < 6) {
    backend.complete(op, dice < 3 ? -ENOSPC : -EIO);
  } else if (op.code == op_code::write && dice < 9) {
    backend.perform(op, 0u);  // no progress
  } else if (op.code == op_code::write && dice < 20 && op.len > 1) {
    backend.perform(op, 1u + static_cast<std::uint32_t>(rng() % (op.len - 1)));  // short: write_all goes on
  } else if ((op.code == op_code::fsync || op.code == op_code::openat) && dice < 5) {
    backend.complete(op, -EIO);  // never a close: an injected close failure would leak the descriptor
  } else {
    backend.perform(op);
  }
}

task<void> stress(stress_run* run) {
  std::mt19937 rng(run->seed);
  network_memory memory(pool_segments * segment_bytes, segment_bytes, 1);
  local_buffer_pool pool(memory.pool(0), 1, pool_segments);
  channel_state_writer writer(test_task);
  if (run->backend) run->backend->set_auto(false);
  runtime::scope waiters;
  std::deque<waiter_slot> slots;  // stable addresses
  const std::size_t bound = 2 + channel_state_writer::outcome_history;

  for (int step = 0; step < 250; ++step) {
    const checkpoint_id top = std::max(writer.latest_started(), writer.max_aborted());
    const auto spread = static_cast<std::int64_t>(rng() % 6) - 2;  // top-2 .. top+3
    const checkpoint_id id = static_cast<checkpoint_id>(std::max<std::int64_t>(1, static_cast<std::int64_t>(top) + spread));
    const unsigned action = rng() % 100;
    if (action < 10) {
      std::filesystem::create_directories(chk_dir(*run, id));
      auto started = writer.start(id, chk_dir(*run, id));
      if (started.ok()) run->accepted[id];
    } else if (action < 13) {
      std::filesystem::create_directories(chk_dir(*run, id));
      std::vector<operator_snapshot> states;
      std::vector<model_record> model;
      const auto operators = static_cast<std::uint32_t>(rng() % 3);
      for (std::uint32_t op = 0; op < operators; ++op) {
        auto bytes = test::pattern_bytes(rng() % 200, static_cast<std::uint32_t>(rng()));
        model.push_back({record_type::operator_state, 0, op, bytes});
        states.push_back({op, std::move(bytes)});
      }
      auto started = writer.start_aligned(id, chk_dir(*run, id), std::move(states));
      if (started.ok()) run->accepted[id] = std::move(model);
    } else if (action < 20) {
      writer.abort(id, random_reason(rng), "stress");
    } else if (action < 42) {
      // Channel state, sometimes with an event among the data.
      const bool input = rng() % 2 == 0;
      const auto group = static_cast<std::uint16_t>(rng() % 3);
      const auto index = static_cast<std::uint32_t>(rng() % 4);
      const std::size_t count = rng() % 4;
      if (pool.in_use() + count > pool_segments - 2) {
        co_await runtime::yield();
        continue;
      }
      std::vector<buffers::buffer_view> views;
      std::vector<model_record> model;
      bool has_event = false;
      for (std::size_t i = 0; i < count; ++i) {
        const bool event = rng() % 40 == 0;
        has_event = has_event || event;
        auto bytes = test::pattern_bytes(1 + rng() % segment_bytes, static_cast<std::uint32_t>(rng()));
        views.push_back(test::captured(pool, bytes, event ? buffers::buffer_kind::event : buffers::buffer_kind::data));
        model.push_back({input ? record_type::input_channel : record_type::output_channel, group, index, std::move(bytes)});
      }
      run->handed += count;
      auto added = input ? writer.add_input(id, group, index, std::move(views))
                         : writer.add_output(id, group, index, std::move(views));
      if (has_event) REQUIRE_FALSE(added.ok());  // an event is never written as channel state
      if (added.ok()) {
        auto& accepted = run->accepted[id];
        accepted.insert(accepted.end(), model.begin(), model.end());
      }
    } else if (action < 47) {
      const auto index = static_cast<std::uint32_t>(rng() % 3);
      auto bytes = test::pattern_bytes(rng() % 500, static_cast<std::uint32_t>(rng()));
      auto added = writer.add_operator_state(id, index, bytes);
      if (added.ok()) run->accepted[id].push_back({record_type::operator_state, 0, index, std::move(bytes)});
    } else if (action < 55) {
      auto finished = rng() % 2 == 0 ? writer.finish_input(id) : writer.finish_output(id);
      (void)finished;  // refusals are fine; they must only not throw
    } else if (action < 60) {
      if (slots.size() < max_waiters) {
        slots.push_back({id, std::nullopt});
        waiters.spawn(wait_into(&writer, &slots.back()));
      }
    } else if (action < 85 && run->backend) {
      complete_one(*run->backend, rng);
    }
    const int yields = static_cast<int>(rng() % 3);
    co_await test::turns(yields);

    REQUIRE(writer.tracked_checkpoints() <= bound);
    REQUIRE(pool.violations() == 0);
    REQUIRE(writer.result_waiters() <= slots.size());
    for (checkpoint_id old = 1; old < writer.ongoing(); ++old) REQUIRE(writer.try_result(old).has_value());
  }

  // Half the seeds let the ongoing checkpoint finish before the shutdown; the others close at once,
  // with whatever I/O is pending.
  if (rng() % 2 == 0 && writer.ongoing() != no_checkpoint) {
    const checkpoint_id last = writer.ongoing();
    (void)writer.finish_input(last);
    (void)writer.finish_output(last);
    slots.push_back({last, std::nullopt});
    waiters.spawn(wait_into(&writer, &slots.back()));
  }
  if (run->backend) {
    for (int i = 0; i < 200 && test::pending_count(*run->backend) > 0; ++i) {
      complete_one(*run->backend, rng);
      co_await test::turns(3);
    }
  } else {
    co_await test::turns(50);
  }
  co_await writer.close();
  co_await waiters.join();

  // After close: refused, recycled, decided.
  auto late = writer.add_input(writer.latest_started() + 1, 0, 0, test::captured_n(pool, 2, 1));
  REQUIRE(late.error().code() == writer_errc::closed);
  run->handed += 2;
  for (const auto& slot : slots) {
    INFO("waiter for checkpoint " << slot.id);
    REQUIRE(slot.outcome.has_value());
  }
  const checkpoint_id top = std::max(writer.latest_started(), writer.max_aborted());
  for (checkpoint_id id = 0; id <= top + 2; ++id) {
    const auto outcome = writer.try_result(id);
    REQUIRE(outcome.has_value());
    if (outcome->completed()) run->completed[id] = *outcome;
  }
  for (const auto& slot : slots) {
    if (slot.outcome->completed()) run->completed[slot.id] = *slot.outcome;
  }
  REQUIRE(writer.tracked_checkpoints() <= bound);
  REQUIRE(writer.result_waiters() == 0);
  REQUIRE(pool.in_use() == 0);
  REQUIRE(pool.violations() == 0);
  REQUIRE(pool.recycled() == run->handed);
}

// A completed checkpoint's file holds exactly what was accepted for it.
void check_completed_files(const stress_run& run) {
  for (const auto& [id, outcome] : run.completed) {
    INFO("checkpoint " << id);
    const auto file = test::parse_state_file(chk_dir(run, id) + "/" + state_file_name(test_task));
    const auto found = run.accepted.find(id);
    REQUIRE(found != run.accepted.end());
    std::vector<model_record> expected;
    for (const auto& r : found->second) {
      if (!r.payload.empty() || r.type == record_type::operator_state) expected.push_back(r);
    }
    REQUIRE(file.records.size() == expected.size());
    std::uint64_t channel_bytes = 0;
    std::uint64_t operator_bytes = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      REQUIRE(file.records[i].header.type == expected[i].type);
      REQUIRE(file.records[i].header.group == expected[i].group);
      REQUIRE(file.records[i].header.index == expected[i].index);
      REQUIRE(file.records[i].payload == expected[i].payload);
      (expected[i].type == record_type::operator_state ? operator_bytes : channel_bytes) += expected[i].payload.size();
    }
    REQUIRE(outcome.channel_state_bytes == channel_bytes);
    REQUIRE(outcome.operator_state_bytes == operator_bytes);
  }
}

}  // namespace

TEST_CASE("stress: random lifecycles with injected I/O faults never throw, lose a buffer, grow or leave a result missing",
          "[channel_state_writer][stress]") {
  std::size_t completions = 0;
  for (std::uint32_t seed = 1; seed <= 200; ++seed) {
    INFO("seed " << seed);
    test::temp_dir dir;
    test_backend* backend = nullptr;
    auto options = test::hand_driven(backend);
    stress_run run{seed, dir.path(), backend, {}, {}, 0};
    sync_wait(stress(&run), std::move(options));
    check_completed_files(run);
    completions += run.completed.size();
  }
  CHECK(completions > 50);  // the stress reaches completions, not only aborts
}

TEST_CASE("stress: random lifecycles on a real io_uring complete or abort cleanly", "[channel_state_writer][stress]") {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    test::temp_dir dir;
    stress_run run{seed, dir.path(), nullptr, {}, {}, 0};
    sync_wait(stress(&run));
    check_completed_files(run);
  }
}
