// Watches against a real etcd: changes made by another client, history from a start revision, a
// compacted start revision, close, a timeout on next(), and a server that dies.

#include "etcd_fixture.hpp"

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace sluice;
using namespace std::chrono_literals;

namespace {

// "put k=v@rev" / "del k@rev" for each event.
std::vector<std::string> describe(const std::vector<etcd::watch_batch>& batches) {
  std::vector<std::string> out;
  for (const auto& b : batches) {
    for (const auto& e : b.events) {
      // Appended, not concatenated: GCC 12 at -O3 warns falsely (-Wrestrict) on the + chain.
      std::string text = e.type == etcd::watch_event::kind::put ? "put " : "del ";
      text.append(e.kv.key);
      if (e.type == etcd::watch_event::kind::put) text.append("=").append(e.kv.value);
      text.append("@").append(std::to_string(e.kv.mod_revision));
      out.push_back(std::move(text));
    }
  }
  return out;
}

std::size_t event_count(const std::vector<etcd::watch_batch>& batches) {
  std::size_t n = 0;
  for (const auto& b : batches) n += b.events.size();
  return n;
}

runtime::task<std::vector<etcd::watch_batch>> collect(etcd::watch* w, std::size_t events) {
  std::vector<etcd::watch_batch> got;
  while (event_count(got) < events) {
    auto b = co_await runtime::with_timeout(w->next(), 3s);
    if (!b || !*b) break;
    got.push_back(std::move(**b));
  }
  co_return got;
}

struct live_outcome {
  std::int64_t created_revision = 0;
  std::int64_t first = 0;
  std::vector<std::string> key_events, prefix_events;
  bool batches_nonempty = true;
  bool open_before = false, open_after = false;
  io::result<etcd::watch_batch> after_close = io::error({}, "");
};

runtime::task<live_outcome> live(etcd::client* watcher, etcd::client* writer) {
  live_outcome o;
  auto w = (co_await watcher->watch("/k")).value();
  auto p = (co_await watcher->watch_prefix("/dir/")).value();
  o.created_revision = w.created_revision();
  o.first = (co_await writer->put("/k", "1")).value();
  (void)(co_await writer->put("/dir/a", "x")).value();
  (void)(co_await writer->put("/dir", "not under the prefix")).value();
  (void)(co_await writer->put("/k", "2")).value();
  (void)(co_await writer->del("/k")).value();
  (void)(co_await writer->del_prefix("/dir/")).value();
  const auto key_batches = co_await collect(&w, 3);
  const auto prefix_batches = co_await collect(&p, 2);
  for (const auto* bs : {&key_batches, &prefix_batches}) {
    for (const auto& b : *bs) o.batches_nonempty = o.batches_nonempty && !b.events.empty() && b.revision > 0;
  }
  o.key_events = describe(key_batches);
  o.prefix_events = describe(prefix_batches);
  o.open_before = w.is_open();
  co_await w.close();
  o.open_after = w.is_open();
  o.after_close = co_await w.next();
  co_await p.close();
  co_return o;
}

}  // namespace

TEST_CASE("a watch sees the puts and deletes another client makes, of its key or under its prefix", "[etcd][watch]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client watcher(etcd.where(), test::quick());
  etcd::client writer(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(live(&watcher, &writer));
  CHECK(o.created_revision == o.first - 1);
  const auto r = o.first;
  auto at = [](std::int64_t rev) { return std::string("@").append(std::to_string(rev)); };
  CHECK(o.key_events == std::vector<std::string>{"put /k=1" + at(r), "put /k=2" + at(r + 3), "del /k" + at(r + 4)});
  CHECK(o.prefix_events == std::vector<std::string>{"put /dir/a=x" + at(r + 1), "del /dir/a" + at(r + 5)});
  CHECK(o.batches_nonempty);
  CHECK(o.open_before);
  CHECK_FALSE(o.open_after);
  REQUIRE_FALSE(o.after_close.ok());
  CHECK(o.after_close.error().code() == etcd::errc::watch_ended);
  CHECK(o.after_close.error().message() == "etcd " + etcd.server.endpoint() + ": watch: the watch was closed");
}

namespace {

struct history_outcome {
  std::int64_t revs[4] = {};
  std::vector<std::string> from_second;
  io::result<etcd::watch_batch> compacted = io::error({}, "");
  std::int64_t compact_revision = 0;
  bool compacted_open = true;
  io::result<etcd::watch_batch> compacted_again = io::error({}, "");
  std::vector<std::string> from_compaction_point;
};

runtime::task<history_outcome> history(etcd::client* c) {
  history_outcome o;
  for (int i = 0; i < 4; ++i) o.revs[i] = (co_await c->put("/h", std::to_string(i))).value();
  {
    auto w = (co_await c->watch("/h", o.revs[1])).value();
    o.from_second = describe(co_await collect(&w, 3));
  }
  (co_await c->compact(o.revs[2])).value();
  {
    auto w = (co_await c->watch("/h", o.revs[0])).value();
    o.compacted = co_await w.next();
    o.compact_revision = w.compact_revision();
    o.compacted_open = w.is_open();
    o.compacted_again = co_await w.next();
  }
  {
    auto w = (co_await c->watch("/h", o.compact_revision)).value();  // where the error said to restart
    o.from_compaction_point = describe(co_await collect(&w, 2));
  }
  co_return o;
}

}  // namespace

TEST_CASE("a watch from a start revision replays history, and from a compacted one it fails saying where to restart",
          "[etcd][watch]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(history(&c));
  auto at = [](std::int64_t rev) { return std::string("@").append(std::to_string(rev)); };
  CHECK(o.from_second == std::vector<std::string>{"put /h=1" + at(o.revs[1]), "put /h=2" + at(o.revs[2]),
                                                  "put /h=3" + at(o.revs[3])});
  REQUIRE_FALSE(o.compacted.ok());
  CHECK(o.compacted.error().code() == etcd::errc::compacted);
  CHECK(o.compacted.error().message() == "etcd " + etcd.server.endpoint() +
                                             ": watch: the start revision is compacted; the oldest revision to watch from is " +
                                             std::to_string(o.revs[2]));
  CHECK(o.compact_revision == o.revs[2]);
  CHECK_FALSE(o.compacted_open);
  REQUIRE_FALSE(o.compacted_again.ok());  // sticky
  CHECK(o.compacted_again.error().message() == o.compacted.error().message());
  CHECK(o.from_compaction_point == std::vector<std::string>{"put /h=2" + at(o.revs[2]), "put /h=3" + at(o.revs[3])});
}

namespace {

struct close_outcome {
  io::result<etcd::watch_batch> pending = io::error({}, "");
  std::chrono::nanoseconds waited{};
  bool timed_out = false;
  std::vector<std::string> after_timeout;
};

runtime::task<void> close_later(etcd::watch* w) {
  (void)co_await runtime::sleep_for(100ms);
  co_await w->close();
}

runtime::task<io::result<etcd::watch_batch>> next_of(etcd::watch* w) { co_return co_await w->next(); }

runtime::task<close_outcome> close_and_timeout(etcd::client* c, etcd::client* writer) {
  close_outcome o;
  {
    // A next() with nothing to yield times out, losing nothing: the watch then yields what comes.
    auto w = (co_await c->watch("/t")).value();
    auto none = co_await runtime::with_timeout(w.next(), 100ms);
    o.timed_out = !none.has_value();
    (void)(co_await writer->put("/t", "after")).value();
    o.after_timeout = describe(co_await collect(&w, 1));
  }
  auto w = (co_await c->watch("/quiet")).value();
  const auto start = runtime::executor::current()->now();
  auto [pending, closed] = co_await runtime::when_all(next_of(&w), close_later(&w));
  (void)closed;
  o.waited = runtime::executor::current()->now() - start;
  o.pending = std::move(pending);
  co_return o;
}

}  // namespace

TEST_CASE("close ends a next() waiting in another task at once, and a next() under a timeout loses nothing", "[etcd][watch]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  etcd::client writer(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(close_and_timeout(&c, &writer));
  CHECK(o.timed_out);
  REQUIRE(o.after_timeout.size() == 1);
  CHECK(o.after_timeout[0].rfind("put /t=after@", 0) == 0);
  REQUIRE_FALSE(o.pending.ok());
  CHECK(o.pending.error().code() == etcd::errc::watch_ended);
  CHECK(o.waited < 2s);  // ended by the close (after 100 ms), not by anything slower
}

namespace {

runtime::task<io::result<etcd::watch>> open_watch(etcd::client* c) { co_return co_await c->watch("/w"); }

runtime::task<io::result<etcd::watch_batch>> next_with_limit(etcd::watch* w) {
  auto b = co_await runtime::with_timeout(w->next(), 10s);
  if (!b) co_return io::error({}, "still waiting 10 s after the server died");
  co_return std::move(*b);
}

}  // namespace

TEST_CASE("a watch ends with an error when its server dies", "[etcd][watch]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  const bool crash = GENERATE(false, true);
  INFO((crash ? "SIGKILL" : "SIGTERM"));
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  runtime::executor ex;
  auto w = ex.block_on(open_watch(&c)).value();
  if (crash) {
    etcd.server.kill();
  } else {
    etcd.server.stop();
  }
  const auto ended = ex.block_on(next_with_limit(&w));
  REQUIRE_FALSE(ended.ok());
  INFO(ended.error().message());
  CHECK(ended.error().message().rfind("etcd " + etcd.server.endpoint() + ": watch: ", 0) == 0);
  const auto& code = ended.error().code();
  CHECK((code == etcd::errc::watch_ended || code == sluice::io::errc::unexpected_eof ||
         code == std::errc::connection_reset || code.category() == etcd::grpc_category()));
}
