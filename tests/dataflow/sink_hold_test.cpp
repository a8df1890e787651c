// A sink's precommit beside its task (connector_parts.hpp, task_checkpoint.hpp): an unaligned
// checkpoint holds the sink at the barrier and runs the precommit while the task takes its other
// barriers. Nothing written after the hold may reach what that precommit stages, and the connector
// sees one call at a time (a commit never overlaps a precommit).
#include <sluice/dataflow/connector_parts.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_id;
namespace rt = sluice::runtime;
namespace io = sluice::io;

namespace {

// Stages records; a precommit keeps what was staged and waits for `gate` before it returns (a
// broker's round trip, a file's fsync); every call is logged, and overlapping calls are counted.
struct gated_log {
  std::vector<std::string> calls;
  std::vector<std::pair<checkpoint_id, std::vector<std::uint64_t>>> precommitted;
  int inside = 0;
  int overlaps = 0;
  rt::event gate{true};
};

class gated_sink final : public sink_connector<std::uint64_t> {
 public:
  explicit gated_sink(gated_log& log) : log_(&log) {}
  rt::task<io::result<void>> recover(sink_recovery) override { co_return io::result<void>(); }
  rt::task<io::result<void>> write(const std::uint64_t& record) override {
    enter();
    log_->calls.push_back("write " + std::to_string(record));
    staged_.push_back(record);
    leave();
    co_return io::result<void>();
  }
  rt::task<io::result<std::vector<std::byte>>> precommit(checkpoint_id id) override {
    enter();
    log_->calls.push_back("precommit " + std::to_string(id));
    log_->precommitted.emplace_back(id, std::exchange(staged_, {}));
    while (!log_->gate.is_set()) {
      const bool woken = co_await log_->gate.wait();
      if (!woken) break;
    }
    leave();
    co_return std::vector<std::byte>{std::byte{7}};
  }
  rt::task<io::result<void>> commit(checkpoint_id id) override {
    enter();
    log_->calls.push_back("commit " + std::to_string(id));
    co_await rt::sleep_for(std::chrono::milliseconds(1));
    leave();
    co_return io::result<void>();
  }

 private:
  void enter() {
    if (log_->inside++ > 0) ++log_->overlaps;
  }
  void leave() { --log_->inside; }
  gated_log* log_;
  std::vector<std::uint64_t> staged_;
};

using tail_type = connector_sink_tail<std::uint64_t>;

rt::task<void> take_state(tail_type* tail, checkpoint_id id, std::optional<io::result<std::vector<std::byte>>>* out) {
  *out = co_await tail->snapshot(id);
}
rt::task<void> commit_of(tail_type* tail, checkpoint_id id, std::optional<io::result<void>>* out) {
  *out = co_await tail->commit(id);
}

rt::task<void> hold_then_precommit(gated_log* log) {
  tail_type tail(std::make_unique<gated_sink>(*log), {});
  io::result<void> recovered = co_await tail.recover({});
  REQUIRE(recovered.ok());
  tail.collect(1);
  tail.collect(2);
  io::result<void> drained = co_await tail.drain_ready();
  REQUIRE(drained.ok());

  // Barrier 5: the hold comes at once, the precommit a little later (it waits for its turn).
  log->gate.reset();
  tail.hold();
  tail.collect(3);  // after the barrier
  CHECK_FALSE(tail.ready());
  io::result<void> held = co_await tail.drain_ready();  // the task loop tries: nothing goes out
  REQUIRE(held.ok());
  CHECK(tail.backlogged());
  std::optional<io::result<std::vector<std::byte>>> state;
  std::optional<io::result<void>> committed;
  rt::scope beside;
  beside.spawn(take_state(&tail, 5, &state));
  co_await rt::sleep_for(std::chrono::milliseconds(1));
  // A commit of an earlier checkpoint comes meanwhile: it waits for the precommit in flight.
  beside.spawn(commit_of(&tail, 4, &committed));
  co_await rt::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(state.has_value());
  CHECK_FALSE(committed.has_value());
  CHECK_FALSE(tail.ready());
  log->gate.set();
  co_await beside.join();
  REQUIRE(state.has_value());
  CHECK(state->ok());
  REQUIRE(committed.has_value());
  CHECK(committed->ok());
  CHECK(tail.ready());
  io::result<void> rest = co_await tail.drain();
  REQUIRE(rest.ok());
  co_await tail.close();
}

}  // namespace

TEST_CASE("a held sink writes nothing until the precommit after the hold returns, and a commit waits for it",
          "[connector]") {
  gated_log log;
  rt::sync_wait(hold_then_precommit(&log), sluice::test::virtual_time());
  // Record 3 came after barrier 5: it is in no precommit of 5, and it is written after it.
  REQUIRE(log.precommitted.size() == 1);
  CHECK(log.precommitted[0].first == 5);
  CHECK(log.precommitted[0].second == std::vector<std::uint64_t>{1, 2});
  CHECK(log.calls == std::vector<std::string>{"write 1", "write 2", "precommit 5", "commit 4", "write 3"});
  CHECK(log.overlaps == 0);
}
