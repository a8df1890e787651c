#include <sluice/dataflow/exactly_once_file_sink.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>

#include <support/backends.hpp>
#include <support/dir_files.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using sluice::dataflow::exactly_once_file_sink;
using sluice::runtime::io_op;
using sluice::runtime::op_code;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::runtime::test_backend;
using sluice::snapshot::checkpoint_id;
using sluice::test::names_in;
using sluice::test::read_text;
using sluice::test::temp_dir;
using sink = exactly_once_file_sink;

namespace {

std::vector<std::string> with_prefix(const std::vector<std::string>& names, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (n.starts_with(prefix)) out.push_back(n);
  }
  return out;
}

// What a reader of the output sees: the part files of the directory, concatenated in name order.
std::string published(const std::string& dir) {
  std::string all;
  for (const auto& name : with_prefix(names_in(dir), "part-")) all += read_text(dir + "/" + name);
  return all;
}

// ---- a scripted run -----------------------------------------------------------------------------

struct step {
  enum class kind { write, snapshot, complete, commit, abort } what;
  checkpoint_id id = 0;  // for all but write
  std::string line;      // for write
};

// The steps, and what the simulated checkpoint storage holds.
struct world {
  std::map<checkpoint_id, std::vector<std::byte>> states;  // operator state per snapshot
  std::map<checkpoint_id, std::size_t> snapshot_step;      // index of each snapshot step
  std::vector<checkpoint_id> completed;                    // in completion order
};

std::vector<step> script() {
  std::vector<step> s;
  std::size_t next_line = 0;
  const auto writes = [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i, ++next_line) {
      // Every 7th line is large, so the 256 KiB buffer is flushed mid-interval.
      const std::size_t pad = next_line % 7 == 3 ? 90'000 : next_line % 5;
      s.push_back({step::kind::write, 0, "rec-" + std::to_string(next_line) + std::string(pad, '.')});
    }
  };
  writes(3);
  s.push_back({step::kind::snapshot, 1, {}});
  writes(2);
  s.push_back({step::kind::complete, 1, {}});
  s.push_back({step::kind::commit, 1, {}});
  writes(8);
  s.push_back({step::kind::snapshot, 2, {}});
  s.push_back({step::kind::snapshot, 3, {}});  // an interval without writes
  s.push_back({step::kind::complete, 2, {}});
  writes(1);
  s.push_back({step::kind::commit, 2, {}});
  s.push_back({step::kind::abort, 3, {}});
  writes(2);
  s.push_back({step::kind::snapshot, 4, {}});
  writes(9);
  s.push_back({step::kind::snapshot, 5, {}});
  s.push_back({step::kind::complete, 5, {}});  // 4 never completes; 5 covers its file
  s.push_back({step::kind::commit, 5, {}});
  writes(3);
  return s;
}

std::string all_lines(const std::vector<step>& steps) {
  std::string s;
  for (const auto& st : steps) {
    if (st.what == step::kind::write) s += st.line + "\n";
  }
  return s;
}

// Runs steps [from, to) on `k`. Checkpoint ids <= `resumed` belong to the run before the restart
// and are skipped; the others are shifted by `id_shift` (a restarted coordinator never reuses ids).
task<void> run_steps(sink* k, std::vector<step> steps, std::size_t from, std::size_t to, world* w,
                     checkpoint_id resumed, checkpoint_id id_shift) {
  for (std::size_t i = from; i < to; ++i) {
    const step& st = steps[i];
    if (st.what != step::kind::write && st.id <= resumed) continue;
    const checkpoint_id id = st.id + id_shift;
    switch (st.what) {
      case step::kind::write: {
        auto r = co_await k->write(st.line);
        r.value();
        break;
      }
      case step::kind::snapshot: {
        auto state = co_await k->snapshot(id);
        w->states[id] = std::move(state).value();
        w->snapshot_step[id] = i;
        break;
      }
      case step::kind::complete:
        w->completed.push_back(id);
        break;
      case step::kind::commit: {
        auto r = co_await k->commit(id);
        r.value();
        break;
      }
      case step::kind::abort:
        k->abort(id);
        break;
    }
  }
}

// The first life: a fresh start, steps [0, crash_at), then a crash (the sink is dropped, unclosed).
task<void> first_life(std::string dir, std::vector<step> steps, std::size_t crash_at, world* w) {
  sink k(dir, 7);
  auto recovered = co_await k.recover({});
  recovered.value();
  co_await run_steps(&k, steps, 0, crash_at, w, 0, 0);
}

// The second life: recover from checkpoint `resume_from` (0: fresh start), replay the steps after its
// snapshot, then a last checkpoint that publishes the tail, and a clean close. With `every` > 0 the
// replay keeps only the writes and checkpoints after every `every` of them instead: file boundaries
// then differ from the first life, as they do when checkpoints are timed.
task<void> second_life(std::string dir, std::vector<step> steps, checkpoint_id resume_from, world* w,
                       std::size_t every) {
  sink k(dir, 7);
  std::vector<std::byte> state;
  std::size_t from = 0;
  if (resume_from != 0) {
    state = w->states.at(resume_from);
    from = w->snapshot_step.at(resume_from) + 1;
  }
  auto recovered = co_await k.recover(state);
  recovered.value();
  if (every > 0) {
    std::vector<step> retimed(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(from));
    std::size_t writes = 0;
    checkpoint_id id = 500;
    for (std::size_t i = from; i < steps.size(); ++i) {
      if (steps[i].what != step::kind::write) continue;
      retimed.push_back(steps[i]);
      if (++writes % every == 0) {
        retimed.push_back({step::kind::snapshot, ++id, {}});
        retimed.push_back({step::kind::commit, id, {}});
      }
    }
    steps = std::move(retimed);
  }
  co_await run_steps(&k, steps, from, steps.size(), w, resume_from, 100);
  auto last = co_await k.snapshot(1000);
  last.value();
  auto committed = co_await k.commit(1000);
  committed.value();
  co_await k.close();
}

task<void> write_lines(sink* k, std::vector<std::string> lines) {
  for (const auto& line : lines) {
    auto r = co_await k->write(line);
    r.value();
  }
}

task<std::vector<std::byte>> snapshot_of(sink* k, checkpoint_id id) {
  auto state = co_await k->snapshot(id);
  co_return std::move(state).value();
}

task<void> commit_of(sink* k, checkpoint_id id) {
  auto r = co_await k->commit(id);
  r.value();
}

task<void> recover_of(sink* k, std::vector<std::byte> state) {
  auto r = co_await k->recover(state);
  r.value();
}

}  // namespace

TEST_CASE("written lines are published, in order, only when their checkpoint commits", "[file_sink]") {
  temp_dir dir;
  const std::string out = dir.file("out");  // created by recover()
  sink k(out, 3);
  sync_wait(recover_of(&k, {}));
  sync_wait(write_lines(&k, {"alpha", "", "gamma"}));
  CHECK(with_prefix(names_in(out), "part-").empty());

  const auto state = sync_wait(snapshot_of(&k, 1));
  CHECK(names_in(out) == std::vector<std::string>{".sluice-staging"});
  CHECK(names_in(out + "/.sluice-staging") ==
        std::vector<std::string>{"next-00003-000000000001", "staged-00003-000000000000"});
  CHECK(k.pending() == std::vector<sink::pending_file>{{1, 0}});
  sync_wait(write_lines(&k, {"delta"}));  // after barrier 1: a new staging file
  CHECK(published(out).empty());

  sync_wait(commit_of(&k, 1));
  CHECK(published(out) == "alpha\n\ngamma\n");
  CHECK(with_prefix(names_in(out), "part-") == std::vector<std::string>{"part-00003-000000000000"});
  CHECK(k.pending().empty());
  sync_wait(commit_of(&k, 1));  // idempotent
  CHECK(published(out) == "alpha\n\ngamma\n");

  sync_wait(snapshot_of(&k, 2));
  sync_wait(commit_of(&k, 2));
  CHECK(published(out) == "alpha\n\ngamma\ndelta\n");
  sync_wait(k.close());
  CHECK(names_in(out) ==
        std::vector<std::string>{".sluice-staging", "part-00003-000000000000", "part-00003-000000000001"});
  CHECK(names_in(out + "/.sluice-staging") == std::vector<std::string>{"next-00003-000000000002"});

  const auto decoded = sink::decode_state(state).value();
  CHECK(decoded.task == 3);
  CHECK(decoded.next_sequence == 1);
  CHECK(decoded.pending == std::vector<sink::pending_file>{{1, 0}});
}

TEST_CASE("an aborted checkpoint's file stays pending until the next commit", "[file_sink]") {
  temp_dir dir;
  sink k(dir.path(), 0);
  sync_wait(recover_of(&k, {}));
  sync_wait(write_lines(&k, {"a"}));
  sync_wait(snapshot_of(&k, 1));
  k.abort(1);
  sync_wait(write_lines(&k, {"b"}));
  const auto state2 = sync_wait(snapshot_of(&k, 2));
  CHECK(k.pending() == std::vector<sink::pending_file>{{1, 0}, {2, 1}});
  CHECK(sink::decode_state(state2).value().pending == k.pending());
  CHECK(published(dir.path()).empty());
  sync_wait(commit_of(&k, 2));
  CHECK(published(dir.path()) == "a\nb\n");
  CHECK(k.pending().empty());
}

namespace {

// Crashes before every step of the script; for each, resumes from the newest completed checkpoint,
// from an older one (recovery fell back), and afresh. Replay with `every` as in second_life().
void check_every_crash(std::size_t every) {
  const auto steps = script();
  const std::string expected = all_lines(steps);
  for (std::size_t crash_at = 0; crash_at <= steps.size(); ++crash_at) {
    for (std::size_t fallback = 0; fallback < 3; ++fallback) {
      temp_dir dir;
      world w;
      sync_wait(first_life(dir.path(), steps, crash_at, &w));
      if (fallback > w.completed.size()) continue;
      const checkpoint_id resume_from = fallback == w.completed.size() ? 0 : w.completed[w.completed.size() - 1 - fallback];
      INFO("crash before step " << crash_at << ", resume from checkpoint " << resume_from);
      sync_wait(second_life(dir.path(), steps, resume_from, &w, every));
      CHECK(published(dir.path()) == expected);
      CHECK(with_prefix(names_in(dir.path()), ".") == std::vector<std::string>{".sluice-staging"});
      CHECK(with_prefix(names_in(dir.path() + "/.sluice-staging"), "staged-").empty());
    }
  }
}

}  // namespace

TEST_CASE("after a crash at any step, recovery and the same replay publish every line exactly once",
          "[file_sink][crash]") {
  check_every_crash(0);
}

TEST_CASE("after a crash at any step, a replay with more checkpoints publishes every line exactly once",
          "[file_sink][crash]") {
  check_every_crash(3);
}

// With fewer files than the first life, a stale newer part file would not be overwritten by the
// replay: only recover() removing it keeps the output free of duplicates.
TEST_CASE("after a crash at any step, a replay with one checkpoint publishes every line exactly once",
          "[file_sink][crash]") {
  check_every_crash(1000);
}

TEST_CASE("recovery from an older checkpoint removes the files a newer one published", "[file_sink][crash]") {
  temp_dir dir;
  std::vector<std::byte> state1;
  {
    sink k(dir.path(), 1);
    sync_wait(recover_of(&k, {}));
    sync_wait(write_lines(&k, {"one"}));
    state1 = sync_wait(snapshot_of(&k, 1));
    sync_wait(commit_of(&k, 1));
    sync_wait(write_lines(&k, {"two"}));
    sync_wait(snapshot_of(&k, 2));
    sync_wait(commit_of(&k, 2));
    sync_wait(write_lines(&k, {"three"}));
  }  // crash: ".sluice-staging/staged-00001-000000000002" holds "three" (buffered, maybe unwritten)
  // Another task's files are not this sink's business.
  std::ofstream(dir.file("part-00002-000000000005")) << "other\n";
  CHECK(published(dir.path()) == "one\ntwo\nother\n");

  sink k(dir.path(), 1);
  sync_wait(recover_of(&k, state1));
  CHECK(names_in(dir.path()) ==
        std::vector<std::string>{".sluice-staging", "part-00001-000000000000", "part-00002-000000000005"});
  CHECK(k.next_sequence() == 1);
  // The replay produces "two" (and "three") again.
  sync_wait(write_lines(&k, {"two", "three"}));
  sync_wait(snapshot_of(&k, 11));
  sync_wait(commit_of(&k, 11));
  CHECK(published(dir.path()) == "one\ntwo\nthree\nother\n");
}

TEST_CASE("recovery publishes the pending files of its checkpoint even if the commit never came", "[file_sink][crash]") {
  temp_dir dir;
  std::vector<std::byte> state;
  {
    sink k(dir.path(), 4);
    sync_wait(recover_of(&k, {}));
    sync_wait(write_lines(&k, {"x", "y"}));
    state = sync_wait(snapshot_of(&k, 9));
  }  // crash after checkpoint 9 completed, before commit(9) reached the sink
  CHECK(published(dir.path()).empty());
  sink k(dir.path(), 4);
  sync_wait(recover_of(&k, state));
  CHECK(published(dir.path()) == "x\ny\n");
  // Recovering twice from the same state is harmless.
  sink again(dir.path(), 4);
  sync_wait(recover_of(&again, state));
  CHECK(names_in(dir.path()) == std::vector<std::string>{".sluice-staging", "part-00004-000000000000"});
}

TEST_CASE("recovery names what is wrong with a state it cannot use", "[file_sink]") {
  temp_dir dir;
  const auto recover_error = [&](std::vector<std::byte> state) {
    sink k(dir.path(), 2);
    auto r = sync_wait(k.recover(state));
    REQUIRE_FALSE(r);
    return r.error().message();
  };
  const std::string what = "recover file sink task 2 in '" + dir.path() + "': ";
  CHECK(recover_error({std::byte{1}, std::byte{0}}) == what + "decode file sink state: truncated (2 bytes)");
  auto other_task = sink::encode_state({5, 3, {}});
  CHECK(recover_error(other_task) == what + "the state belongs to task 5");
  auto future = other_task;
  future[0] = std::byte{9};
  CHECK(recover_error(future) == what + "decode file sink state: version 9 is not supported (expected 1)");
  auto lost = sink::encode_state({2, 3, {{4, 1}}});
  CHECK(recover_error(lost) == what +
                                   "the pending file of checkpoint 4 has neither its staging file "
                                   "'.sluice-staging/staged-00002-000000000001' nor its final file "
                                   "'part-00002-000000000001': output was lost");
}

TEST_CASE("the state round-trips and rejects malformed bytes", "[file_sink]") {
  const sink::state s{12, 40, {{3, 37}, {4, 39}}};
  const auto bytes = sink::encode_state(s);
  CHECK(bytes.size() == 20 + 2 * 16);
  const auto back = sink::decode_state(bytes).value();
  CHECK(back.task == 12);
  CHECK(back.next_sequence == 40);
  CHECK(back.pending == s.pending);

  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK(sink::decode_state(longer).error().message() ==
        "decode file sink state: 53 bytes do not hold the 2 pending files they announce");
  const auto beyond = sink::encode_state({12, 39, {{3, 37}, {4, 39}}});
  CHECK(sink::decode_state(beyond).error().message() ==
        "decode file sink state: pending sequence 39 is out of order or not below the next (39)");
}

namespace {

struct fault_outcome {
  std::string snapshot_error;
  std::string write_error;
  std::string staging_path;
  bool failed = false;
};

task<fault_outcome> fsync_fails(std::string dir, test_backend* backend) {
  fault_outcome out;
  sink k(dir, 5);
  auto recovered = co_await k.recover({});
  recovered.value();
  auto written = co_await k.write("lost?");
  written.value();
  out.staging_path = k.staging_path(0);
  backend->add_fault([](const io_op& op) -> std::optional<std::int32_t> {
    return op.code == op_code::fsync ? std::optional<std::int32_t>(-EIO) : std::nullopt;
  });
  auto state = co_await k.snapshot(1);
  if (!state) out.snapshot_error = state.error().message();
  out.failed = k.failed();
  backend->clear_faults();
  // A later fsync might succeed without the dropped pages: the sink refuses to go on.
  auto again = co_await k.write("more");
  if (!again) out.write_error = again.error().message();
  co_await k.close();
  co_return out;
}

}  // namespace

TEST_CASE("a failing fsync fails the snapshot naming the file, and the sink stays failed", "[file_sink][faults]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  const auto out = sync_wait(fsync_fails(dir.path(), backend), std::move(options));
  CHECK(out.snapshot_error == "fsync '" + out.staging_path + "': Input/output error");
  CHECK(out.failed);
  CHECK(out.write_error == "write to file sink task 5 in '" + dir.path() +
                               "': the sink failed earlier (fsync '" + out.staging_path +
                               "': Input/output error); recover from the last completed checkpoint");
  CHECK(published(dir.path()).empty());
}

TEST_CASE("a sink refuses writes before recover()", "[file_sink]") {
  temp_dir dir;
  sink k(dir.path(), 1);
  auto r = sync_wait(k.write("early"));
  REQUIRE_FALSE(r);
  CHECK(r.error().message() == "write to file sink task 1 in '" + dir.path() + "': recover() was not called");
}
