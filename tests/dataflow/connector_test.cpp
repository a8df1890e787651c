// The connector API (connector.hpp): a source of one's own that is often idle never holds up a
// checkpoint; a two-phase sink of one's own sees recover, precommit and commit in order, and a job
// stopped mid-run and started again commits every record exactly once; specs that do not name their
// connector are refused.
#include <sluice/dataflow/connector_parts.hpp>
#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_id;
using sluice::snapshot::checkpoint_mode;
using sluice::test::temp_dir;
namespace rt = sluice::runtime;
namespace io = sluice::io;

namespace {

job_settings quick_settings(const temp_dir& dir) {
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.checkpoint_interval = std::chrono::milliseconds(20);
  settings.mode = checkpoint_mode::unaligned;
  settings.handle_signals = false;
  return settings;
}

// An outside system the sink commits into, with a per-task marker (the last checkpoint committed),
// as a database sink would keep in the same transaction: a commit at or below the marker is a no-op.
struct fake_table {
  std::mutex mutex;
  std::vector<std::uint64_t> rows;
  // (run, task) -> last committed checkpoint: keyed on the run as sink_recovery asks
  std::map<std::pair<std::string, std::uint64_t>, checkpoint_id> marker;
  std::map<std::uint64_t, std::set<std::string>> runs;  // task -> the runs its sinks recovered as
  std::vector<std::string> calls;                 // "recover", "precommit 3", "commit 3" (task 0 only)
  std::vector<std::uint64_t> sorted_rows() {
    std::lock_guard lock(mutex);
    std::vector<std::uint64_t> out = rows;
    std::sort(out.begin(), out.end());
    return out;
  }
};

class table_sink final : public sink_connector<std::uint64_t> {
 public:
  table_sink(fake_table& table, std::uint64_t task, bool record_calls)
      : table_(&table), task_(task), record_calls_(record_calls) {}

  rt::task<io::result<void>> recover(sink_recovery from) override {
    note("recover");
    run_ = from.run;
    {
      std::lock_guard lock(table_->mutex);
      table_->runs[task_].insert(run_);
    }
    if (from.fresh && !from.precommitted.empty()) co_return io::error(std::make_error_code(std::errc::invalid_argument), "fresh with bytes");
    if (!from.precommitted.empty()) {
      pending_ = detail::decode_state<std::vector<std::pair<checkpoint_id, std::vector<std::uint64_t>>>>(
          from.precommitted, "table sink");
    }
    apply_through(~checkpoint_id{0});
    co_return io::result<void>();
  }
  rt::task<io::result<void>> write(const std::uint64_t& record) override {
    staged_.push_back(record);
    co_return io::result<void>();
  }
  rt::task<io::result<std::vector<std::byte>>> precommit(checkpoint_id id) override {
    note("precommit " + std::to_string(id));
    pending_.emplace_back(id, std::move(staged_));
    staged_.clear();
    co_return detail::encode_state(pending_);
  }
  rt::task<io::result<void>> commit(checkpoint_id id) override {
    note("commit " + std::to_string(id));
    apply_through(id);
    co_return io::result<void>();
  }

 private:
  void note(std::string what) {
    if (!record_calls_) return;
    std::lock_guard lock(table_->mutex);
    table_->calls.push_back(std::move(what));
  }
  void apply_through(checkpoint_id id) {
    std::lock_guard lock(table_->mutex);
    while (!pending_.empty() && pending_.front().first <= id) {
      auto& [cp, rows] = pending_.front();
      auto it = table_->marker.find({run_, task_});
      if (it == table_->marker.end() || it->second < cp) {  // the marker: one commit per checkpoint
        table_->rows.insert(table_->rows.end(), rows.begin(), rows.end());
        table_->marker[{run_, task_}] = cp;
      }
      pending_.erase(pending_.begin());
    }
  }

  fake_table* table_;
  std::uint64_t task_;
  std::string run_;
  bool record_calls_;
  std::vector<std::uint64_t> staged_;
  std::vector<std::pair<checkpoint_id, std::vector<std::uint64_t>>> pending_;
};

sink_spec<std::uint64_t> table_spec(fake_table& table) {
  sink_spec<std::uint64_t> spec;
  spec.identity = {"sink=table", "table.name=t"};
  spec.make = [&table](const connector_context& c) {
    return std::make_unique<table_sink>(table, c.task, c.subtask == 0);
  };
  return spec;
}

void build(job_builder& job, fake_table& table, std::uint64_t count) {
  job.generate<std::uint64_t>("gen", 2, count, [](std::uint64_t n) { return n; })
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("sink", 2)
      .write_to(table_spec(table));
}

std::vector<std::uint64_t> iota(std::uint64_t count) {
  std::vector<std::uint64_t> out(count);
  for (std::uint64_t n = 0; n < count; ++n) out[n] = n;
  return out;
}

// A source that emits `count` records, then is idle (nothing at hand, read() returns idle) until
// `checkpoints` checkpoints have completed while it waited, then ends. Its wait is cancellable.
class idle_source final : public source_connector<std::uint64_t> {
 public:
  idle_source(std::uint64_t count, std::atomic<int>& completed, int checkpoints)
      : count_(count), completed_(&completed), checkpoints_(checkpoints) {}
  void restore(std::span<const std::byte> bytes) override { next_ = detail::decode_state<std::uint64_t>(bytes, "idle"); }
  rt::task<io::result<void>> open() override { co_return io::result<void>(); }
  rt::task<io::result<read_status>> read(source_output<std::uint64_t>& out, std::size_t max) override {
    for (std::size_t i = 0; i < max && next_ < count_; ++i) out.emit(next_++);
    if (next_ < count_) co_return read_status::more;
    if (!idle_since_) idle_since_ = completed_->load();
    ++idle_reads_;
    if (completed_->load() - *idle_since_ >= checkpoints_) co_return read_status::end;
    co_return read_status::idle;
  }
  rt::task<void> wait_readable() override {
    // Polls the count the runner's callback raises (on another thread); a stop cancels the sleep.
    (void)co_await rt::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<std::byte> position() const override { return detail::encode_state(next_); }

 private:
  std::uint64_t count_;
  std::atomic<int>* completed_;
  int checkpoints_;
  std::uint64_t next_ = 0;
  std::optional<int> idle_since_;
  std::uint64_t idle_reads_ = 0;
};

}  // namespace

TEST_CASE("a source connector that is idle does not hold up checkpoints", "[dataflow][connector]") {
  temp_dir dir;
  fake_table table;
  std::atomic<int> completed{0};
  job_builder job("idle");
  source_spec<std::uint64_t> spec;
  spec.identity = {"source=idle"};
  spec.make = [&completed](const connector_context&) { return std::make_unique<idle_source>(100, completed, 3); };
  job.read_from("idle", 1, spec).write_to(table_spec(table));
  job_settings settings = quick_settings(dir);
  settings.on_checkpoint = [&completed](const sluice::snapshot::checkpoint_stats& c) {
    if (c.outcome.completed()) ++completed;
  };
  const job_result r = run_job(job, settings);
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  // The source ended only because checkpoints completed while it was idle.
  CHECK(completed.load() >= 3);
  CHECK(table.sorted_rows() == iota(100));
}

TEST_CASE("a sink connector is recovered first, then pre-commits at barriers and commits on completion",
          "[dataflow][connector]") {
  temp_dir dir;
  fake_table table;
  job_builder job("order");
  build(job, table, 20'000);
  const job_result r = run_job(job, quick_settings(dir));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(table.sorted_rows() == iota(20'000));
  std::lock_guard lock(table.mutex);
  REQUIRE(table.calls.size() >= 3);
  CHECK(table.calls.front() == "recover");
  // Every commit follows the precommit of its checkpoint; none commits a checkpoint not pre-committed.
  std::vector<std::string> precommitted;
  for (const std::string& call : table.calls) {
    if (call.rfind("precommit ", 0) == 0) precommitted.push_back(call.substr(10));
    if (call.rfind("commit ", 0) == 0) {
      INFO(call);
      CHECK(std::find(precommitted.begin(), precommitted.end(), call.substr(7)) != precommitted.end());
    }
  }
  CHECK(table.calls.back().rfind("commit ", 0) == 0);  // the last checkpoint is committed
}

TEST_CASE("a job with a sink connector stopped mid-run and started again commits every record once",
          "[dataflow][connector]") {
  temp_dir dir;
  fake_table table;
  for (int attempt = 0; attempt < 3; ++attempt) {
    job_builder job("restart");
    build(job, table, 400'000);
    job_settings settings = quick_settings(dir);
    std::stop_source stop;
    settings.stop = stop.get_token();
    const checkpoint_id stop_after = 2 + static_cast<checkpoint_id>(attempt);
    checkpoint_id first_seen = 0;
    settings.on_checkpoint = [&stop, &first_seen, stop_after](const sluice::snapshot::checkpoint_stats& c) {
      if (first_seen == 0) first_seen = c.id;
      if (c.outcome.completed() && c.id >= first_seen + stop_after) stop.request_stop();
    };
    const job_result r = run_job(job, settings);
    INFO(r.message);
    if (r.exit_code == 0) break;  // it ended before the stop came
    REQUIRE(r.exit_code == 130);
  }
  job_builder job("restart");
  build(job, table, 400'000);
  const job_result last = run_job(job, quick_settings(dir));
  INFO(last.message);
  REQUIRE(last.exit_code == 0);
  CHECK(table.sorted_rows() == iota(400'000));
  // Every restart resumed its sinks' runs: one run per task, however often the job started.
  std::lock_guard lock(table.mutex);
  REQUIRE(table.runs.size() == 2);
  for (const auto& [task, runs] : table.runs) CHECK(runs.size() == 1);
}

TEST_CASE("two jobs of one name into one outside system each commit all their records (their sinks' runs differ)",
          "[dataflow][connector]") {
  // Keyed on the job's name and task, the second job's checkpoints looked committed already.
  temp_dir first_dir, second_dir;
  fake_table table;
  for (temp_dir* dir : {&first_dir, &second_dir}) {
    job_builder job("same");
    build(job, table, 5'000);
    const job_result r = run_job(job, quick_settings(*dir));
    INFO(r.message);
    REQUIRE(r.exit_code == 0);
  }
  std::vector<std::uint64_t> twice;
  for (std::uint64_t n : iota(5'000)) twice.insert(twice.end(), {n, n});
  CHECK(table.sorted_rows() == twice);
  std::lock_guard lock(table.mutex);
  for (const auto& [task, runs] : table.runs) CHECK(runs.size() == 2);
}

TEST_CASE("a connector spec must name its connector first in its identity", "[dataflow][connector]") {
  fake_table table;
  job_builder job("bad");
  sink_spec<std::uint64_t> spec = table_spec(table);
  spec.identity = {"table.name=t"};
  auto s = job.generate<std::uint64_t>("gen", 1, 10, [](std::uint64_t n) { return n; });
  CHECK_THROWS_WITH(s.write_to(spec), Catch::Contains("must name the connector"));
  source_spec<std::uint64_t> none;
  none.identity = {"source=none"};
  CHECK_THROWS_WITH(job.read_from("none", 1, none), Catch::Contains("no factory"));
}
