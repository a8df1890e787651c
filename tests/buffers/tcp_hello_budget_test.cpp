// The data port's bounds against abuse (tcp_transport.hpp): the log budget that keeps a flood of
// refusals from flooding the log (log_budget.hpp) while still accounting for each one.
#include <sluice/buffers/log_budget.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/temp_dir.hpp>

#include "log_capture.hpp"
#include "tcp_fixture.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace sluice::test::tcp;
using sluice::test::count_lines;
using sluice::test::stderr_capture;
using std::chrono::milliseconds;

// --- log_budget ------------------------------------------------------------------------------------

TEST_CASE("log_budget logs the first lines of a window per kind and counts the rest for its summary",
          "[hello][log-budget]") {
  log_budget budget(3, milliseconds(1000));
  const log_budget::time_point t0{};
  int logged = 0;
  for (int i = 0; i < 10; ++i) logged += budget.admit("timeout", t0 + milliseconds(i), "line " + std::to_string(i));
  CHECK(logged == 3);
  CHECK(budget.admit("malformed", t0 + milliseconds(10), "other"));  // each kind has its own lines
  CHECK(budget.due(t0 + milliseconds(999)).empty());                // the window is not over
  const std::vector<log_budget::summary> due = budget.due(t0 + milliseconds(1000));
  REQUIRE(due.size() == 1);  // malformed suppressed nothing: no summary
  CHECK(due[0].kind == "timeout");
  CHECK(due[0].suppressed == 7);
  CHECK(due[0].latest == "line 9");
  CHECK(due[0].window == milliseconds(1000));
  CHECK(budget.suppressed_total() == 7);
  // The next window starts afresh.
  CHECK(budget.admit("timeout", t0 + milliseconds(1500), "again"));
}

TEST_CASE("log_budget keeps the events of an ended window for the summary due() has not given yet",
          "[hello][log-budget]") {
  log_budget budget(1, milliseconds(100));
  const log_budget::time_point t0{};
  CHECK(budget.admit("closed", t0, "a"));
  CHECK_FALSE(budget.admit("closed", t0 + milliseconds(1), "b"));
  CHECK_FALSE(budget.admit("closed", t0 + milliseconds(500), "c"));  // late: counted, not lost
  const auto due = budget.due(t0 + milliseconds(500));
  REQUIRE(due.size() == 1);
  CHECK(due[0].suppressed == 2);
  CHECK(due[0].latest == "c");
}

TEST_CASE("log_budget flush gives every open window's summary", "[hello][log-budget]") {
  log_budget budget(0, milliseconds(100'000));
  const log_budget::time_point t0{};
  CHECK_FALSE(budget.admit("a", t0, "x"));
  CHECK_FALSE(budget.admit("b", t0, "y"));
  CHECK_FALSE(budget.admit("b", t0, "z"));
  const auto all = budget.flush(t0 + milliseconds(5));
  REQUIRE(all.size() == 2);
  CHECK(all[0].kind == "a");
  CHECK(all[0].suppressed == 1);
  CHECK(all[1].kind == "b");
  CHECK(all[1].suppressed == 2);
  CHECK(all[1].latest == "z");
  CHECK(budget.flush(t0 + milliseconds(6)).empty());
}

// --- the transport ---------------------------------------------------------------------------------

namespace {

transport_options worker(const char* node) {
  transport_options o;
  o.job_name = "wordcount";
  o.epoch = 7;
  o.node_id = node;
  o.secret = std::vector<std::byte>(32, std::byte{'k'});
  return o;
}

task<void> wait_rejected(const tcp_transport* t, std::uint64_t n) {
  for (int i = 0; i < 5000 && t->stats().rejected.total() < n; ++i) (void)co_await sleep_for(milliseconds(1));
}

task<void> garbage_body(int connections, std::size_t lines, transport_stats* out) {
  transport_options o = worker("node-s");
  o.refusal_log_lines = lines;
  std::unique_ptr<tcp_transport> t = co_await start_transport(o);
  for (int i = 0; i < connections; ++i) {
    auto c = co_await sluice::io::tcp_stream::connect(t->local_address());
    sluice::io::tcp_stream s = std::move(c).value();
    const std::vector<std::byte> noise(64, std::byte{'Z'});
    (void)co_await s.send_all(noise);
    std::vector<std::byte> sink(64);
    for (;;) {
      auto got = co_await s.recv(sink);
      if (!got || got.value() == 0) break;
    }
    (void)co_await s.close();
  }
  co_await wait_rejected(t.get(), static_cast<std::uint64_t>(connections));
  *out = t->stats();
  co_await t->close();  // logs the summary of the open window
}

}  // namespace

TEST_CASE("a flood of refusals is logged a few lines per reason, and a summary counts the rest",
          "[tcp][hello][flood]") {
  sluice::test::temp_dir dir;
  transport_stats stats;
  std::string text;
  {
    stderr_capture capture(dir.file("log"));
    sync_wait(garbage_body(12, 3, &stats));
    text = capture.stop();
  }
  CHECK(stats.rejected.malformed == 12);
  CHECK(count_lines(text, "refused: not a sluice hello: bad magic 'ZZZZ'") == 3 + 1);  // 3 lines, the summary's latest
  CHECK(count_lines(text, "tcp transport: 9 more connection(s) refused (malformed)") == 1);
}

TEST_CASE("transport options with no refusal log window are refused", "[tcp][hello]") {
  transport_options o = worker("node-s");
  o.refusal_log_window = milliseconds(0);
  const auto no_window = sync_wait(tcp_transport::start(address::loopback_v4(), o));
  CHECK_FALSE(static_cast<bool>(no_window));
}
