// The data port's bounds against one abusive address (tcp_transport.hpp): the share of hello slots
// one source address may hold (max_unauthenticated_per_source), and the log budget that keeps a
// flood of refusals from flooding the log (log_budget.hpp) while still accounting for each one.
#include <sluice/buffers/log_budget.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/temp_dir.hpp>

#include "log_capture.hpp"
#include "tcp_fixture.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

// A blocking connection from `from` (an address of 127/8) to `to`; the kernel completes it whether
// or not the listener accepts yet, so the executor's thread may make it. -1 on failure.
int connect_from(const char* from, const address& to) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &src.sin_addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 || ::connect(fd, to.data(), to.size()) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

task<void> wait_rejected(const tcp_transport* t, std::uint64_t n) {
  for (int i = 0; i < 5000 && t->stats().rejected.total() < n; ++i) (void)co_await sleep_for(milliseconds(1));
}

struct share_report {
  int opened = 0;
  bool welcomed = false;
  std::string hello_reason;
  transport_stats stats;
};

task<void> share_body(share_report* out) {
  transport_options o = worker("node-s");
  o.max_unauthenticated = 8;
  o.max_unauthenticated_per_source = 4;
  std::unique_ptr<tcp_transport> t = co_await start_transport(o);
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_from("127.0.0.2", t->local_address());
    if (fd >= 0) idle.push_back(fd);
  }
  out->opened = static_cast<int>(idle.size());
  co_await wait_rejected(t.get(), 16);  // all but the address's share are closed at once
  // A peer from another address (127.0.0.1) still finds a slot.
  const fake_identity me{"wordcount", 7, "node-z", std::vector<std::byte>(32, std::byte{'k'})};
  fake_peer p = co_await dial_peer(t->local_address(), &me);
  out->welcomed = p.hello.ok;
  out->hello_reason = p.hello.reason;
  (void)co_await p.stream.close();
  out->stats = t->stats();
  for (int fd : idle) ::close(fd);
  co_await t->close();
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

TEST_CASE("one address holds at most its share of the hello slots: a peer from another one gets in",
          "[tcp][hello][flood]") {
  share_report r;
  sync_wait(share_body(&r));
  REQUIRE(r.opened == 20);
  CHECK(r.welcomed);
  CHECK(r.hello_reason.empty());
  CHECK(r.stats.rejected.over_capacity == 16);  // 20 from 127.0.0.2, 4 of them held
  CHECK(r.stats.unauthenticated_peak <= 5);     // its 4, and the peer from 127.0.0.1
}

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

TEST_CASE("transport options with no per-source share or no refusal log window are refused",
          "[tcp][hello]") {
  transport_options o = worker("node-s");
  o.max_unauthenticated_per_source = 0;
  const auto none = sync_wait(tcp_transport::start(address::loopback_v4(), o));
  CHECK_FALSE(static_cast<bool>(none));
  o = worker("node-s");
  o.refusal_log_window = milliseconds(0);
  const auto no_window = sync_wait(tcp_transport::start(address::loopback_v4(), o));
  CHECK_FALSE(static_cast<bool>(no_window));
}
