// A sink whose commit of the final checkpoint fails (issue 33): exit code 0 means every sink
// committed the final checkpoint. A commit that fails there fails the job (exit code 1) naming the
// sink's task and the cause, where it used to be logged "after the final checkpoint" and the job
// ended "done" with the output unpublished. The next run resumes from that checkpoint: the sink's
// recover() commits what it pre-committed (a repeat is a no-op), and the output is whole and exact.
//
// The sink's commit fails only once the job has taken the final checkpoint as done, as a remote
// database's commit does (the runner learns of the completion before the commit's round trip
// ends): it waits until the source has closed, which the source does only after the runner told it
// to finish, which it does only after it recorded the final checkpoint as done.
#include <sluice/dataflow/connector_parts.hpp>
#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_id;
using sluice::snapshot::checkpoint_mode;
using sluice::test::temp_dir;
namespace rt = sluice::runtime;
namespace io = sluice::io;

namespace {

// An outside system with a commit marker per (run, task), as a database sink keeps one, that can
// refuse every batch (a CHECK constraint the rows break, say) until told otherwise.
struct refusing_table {
  std::mutex mutex;
  std::vector<std::uint64_t> rows;
  std::map<std::pair<std::string, std::uint64_t>, checkpoint_id> marker;
  bool refuse = false;
  std::atomic<bool> source_closed{false};
  std::vector<std::uint64_t> sorted_rows() {
    std::lock_guard lock(mutex);
    std::vector<std::uint64_t> out = rows;
    std::sort(out.begin(), out.end());
    return out;
  }
};

using batches = std::vector<std::pair<checkpoint_id, std::vector<std::uint64_t>>>;

class refusing_sink final : public sink_connector<std::uint64_t> {
 public:
  refusing_sink(refusing_table& table, std::uint64_t task) : table_(&table), task_(task) {}

  rt::task<io::result<void>> recover(sink_recovery from) override {
    run_ = from.run;
    if (!from.precommitted.empty()) pending_ = detail::decode_state<batches>(from.precommitted, "refusing sink");
    co_return apply_through(~checkpoint_id{0});
  }
  rt::task<io::result<void>> write(const std::uint64_t& record) override {
    staged_.push_back(record);
    co_return io::result<void>();
  }
  rt::task<io::result<std::vector<std::byte>>> precommit(checkpoint_id id) override {
    pending_.emplace_back(id, std::move(staged_));
    staged_.clear();
    co_return detail::encode_state(pending_);
  }
  rt::task<io::result<void>> commit(checkpoint_id id) override {
    // Polls a flag the source's task sets on another thread; a stop ends the sleep.
    while (!table_->source_closed.load()) {
      const bool slept = co_await rt::sleep_for(std::chrono::milliseconds(1));
      if (!slept) break;
    }
    co_return apply_through(id);
  }

 private:
  io::result<void> apply_through(checkpoint_id id) {
    std::lock_guard lock(table_->mutex);
    while (!pending_.empty() && pending_.front().first <= id) {
      auto& [cp, rows] = pending_.front();
      auto it = table_->marker.find({run_, task_});
      if (it == table_->marker.end() || it->second < cp) {
        if (table_->refuse) {
          return io::error(std::make_error_code(std::errc::invalid_argument),
                           "the table refused the batch of checkpoint " + std::to_string(cp));
        }
        table_->rows.insert(table_->rows.end(), rows.begin(), rows.end());
        table_->marker[{run_, task_}] = cp;
      }
      pending_.erase(pending_.begin());
    }
    return io::result<void>();
  }

  refusing_table* table_;
  std::uint64_t task_;
  std::string run_;
  std::vector<std::uint64_t> staged_;
  batches pending_;
};

// 0 .. count-1; close() tells the table (the task closes its source once the job finished it).
class counting_source final : public source_connector<std::uint64_t> {
 public:
  counting_source(std::uint64_t count, refusing_table& table) : count_(count), table_(&table) {}
  void restore(std::span<const std::byte> bytes) override {
    next_ = detail::decode_state<std::uint64_t>(bytes, "count");
  }
  rt::task<io::result<void>> open() override { co_return io::result<void>(); }
  rt::task<io::result<read_status>> read(source_output<std::uint64_t>& out, std::size_t max) override {
    for (std::size_t i = 0; i < max && next_ < count_; ++i) out.emit(next_++);
    co_return next_ < count_ ? read_status::more : read_status::end;
  }
  std::vector<std::byte> position() const override { return detail::encode_state(next_); }
  rt::task<void> close() override {
    table_->source_closed = true;
    co_return;
  }

 private:
  std::uint64_t count_;
  refusing_table* table_;
  std::uint64_t next_ = 0;
};

job_result run_into(const temp_dir& dir, refusing_table& table, std::uint64_t count) {
  table.source_closed = false;
  job_builder job("final-commit");
  source_spec<std::uint64_t> source;
  source.identity = {"source=count"};
  source.make = [count, &table](const connector_context&) { return std::make_unique<counting_source>(count, table); };
  sink_spec<std::uint64_t> spec;
  spec.identity = {"sink=refusing", "refusing.table=t"};
  spec.make = [&table](const connector_context& c) { return std::make_unique<refusing_sink>(table, c.task); };
  job.read_from("count", 1, source)
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("sink", 2)
      .write_to(spec);
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.checkpoint_interval = std::chrono::hours(1);  // the final checkpoint is the only one
  settings.mode = checkpoint_mode::aligned;
  settings.handle_signals = false;
  return run_job(job, settings);
}

std::vector<std::uint64_t> iota(std::uint64_t count) {
  std::vector<std::uint64_t> out(count);
  for (std::uint64_t n = 0; n < count; ++n) out[n] = n;
  return out;
}

}  // namespace

TEST_CASE("a sink commit of the final checkpoint that fails fails the job naming the sink task and the cause",
          "[dataflow][final_commit]") {
  temp_dir dir;
  refusing_table table;
  table.refuse = true;
  const job_result failed = run_into(dir, table, 5000);
  INFO(failed.message);
  CHECK(failed.exit_code == 1);
  CHECK(failed.message.find("task sink#") != std::string::npos);
  CHECK(failed.message.find("the table refused the batch of checkpoint ") != std::string::npos);
  CHECK(table.sorted_rows().empty());

  // Still refused: the rerun's recovery commits the checkpoint's batches, and fails the same way.
  const job_result again = run_into(dir, table, 5000);
  INFO(again.message);
  CHECK(again.exit_code == 1);
  CHECK(again.message.find("the table refused the batch of checkpoint ") != std::string::npos);

  // Once the table takes them, the rerun resumes from the final checkpoint and commits it: exact.
  table.refuse = false;
  const job_result resumed = run_into(dir, table, 5000);
  INFO(resumed.message);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.resumed_from.has_value());
  CHECK(table.sorted_rows() == iota(5000));
}
