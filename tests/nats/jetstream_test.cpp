// GCC 12 at -O3 reports a std::string copy inlined into these tests as a memcpy past PTRDIFF_MAX
// (-Wstringop-overflow, -Wrestrict: known false positives of its range analysis).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <sluice/nats/client.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/nats/jetstream.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/nats_server.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace sluice;
using namespace std::chrono_literals;
using runtime::task;

namespace {

struct vector_collector final : dataflow::collector<std::string> {
  std::vector<std::string> records;
  void collect(const std::string& r) override { records.push_back(r); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};

nats::nats_url url_of(std::uint16_t port, std::string name) {
  return nats::parse_url("nats://127.0.0.1:" + std::to_string(port) + "/" + name).value();
}

task<std::string> publish_twice(std::uint16_t port) {
  auto c = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  std::vector<std::string> subjects;
  subjects.push_back("orders");
  (co_await nats::create_stream(*c, "ORDERS", std::move(subjects))).value();
  auto a = (co_await nats::publish_async(*c, "orders", "one", "id-1")).value();
  auto b = (co_await nats::publish_async(*c, "orders", "one again", "id-1")).value();
  auto d = (co_await nats::publish_async(*c, "orders", "two", "id-2")).value();
  auto ack_a = (co_await nats::await_ack(*c, a)).value();
  auto ack_b = (co_await nats::await_ack(*c, b)).value();
  auto ack_d = (co_await nats::await_ack(*c, d)).value();
  auto info = (co_await nats::get_stream_info(*c, "ORDERS")).value();
  co_await c->close();
  co_return std::to_string(ack_a.seq) + (ack_a.duplicate ? "d" : "") + " " + std::to_string(ack_b.seq) + (ack_b.duplicate ? "d" : "") +
      " " + std::to_string(ack_d.seq) + " last=" + std::to_string(info.last_seq) +
      " window=" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(info.duplicate_window).count());
}

// Fills stream S (subject s) with "m1".."mN".
task<int> fill(std::uint16_t port, int n) {
  auto c = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  std::vector<std::string> subjects;
  subjects.push_back("s");
  (co_await nats::create_stream(*c, "S", std::move(subjects))).value();
  std::vector<std::shared_ptr<nats::pending_reply>> slots;
  for (int i = 1; i <= n; ++i) slots.push_back((co_await nats::publish_async(*c, "s", "m" + std::to_string(i), "f" + std::to_string(i))).value());
  for (auto& s : slots) (co_await nats::await_ack(*c, s)).value();
  co_await c->close();
  co_return n;
}

// Reads with a source until `end` or `limit` records; yields the records and the final position.
task<std::pair<std::vector<std::string>, std::vector<std::byte>>> read_source(nats::nats_url url, bool bounded,
                                                                             std::vector<std::byte> from, std::size_t limit,
                                                                             std::size_t subtask, std::size_t parallelism) {
  dataflow::connector_context ctx;
  ctx.job = "j";
  ctx.subtask = subtask;
  ctx.parallelism = parallelism;
  auto source = nats::make_jetstream_source(ctx, url, bounded);
  if (!from.empty()) source->restore(from);
  (co_await source->open()).value();
  vector_collector got;
  dataflow::source_output<std::string> out(got);
  for (;;) {
    auto status = (co_await source->read(out, 100)).value();
    if (status == dataflow::read_status::end || got.records.size() >= limit) break;
    if (status == dataflow::read_status::idle) co_await source->wait_readable();
  }
  auto position = source->position();
  co_await source->close();
  co_return std::make_pair(got.records, position);
}

// The source's position: last sequence, bound, bound fixed.
std::vector<std::byte> position_bytes(std::uint64_t last, std::uint64_t bound) {
  std::vector<std::byte> out;
  for (std::uint64_t v : {last, bound}) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  out.push_back(std::byte{1});
  return out;
}

}  // namespace

TEST_CASE("a JetStream publish with a Nats-Msg-Id seen before is acknowledged as a duplicate and not stored") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  CHECK(runtime::sync_wait(publish_twice(nats.port())) == "1 1d 2 last=2 window=120");
}

TEST_CASE("the jetstream source reads from a restored position and stops at the bound fixed at its first open") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  runtime::sync_wait(fill(nats.port(), 10));
  const auto url = url_of(nats.port(), "S");
  auto [all, at_end] = runtime::sync_wait(read_source(url, true, {}, 1000, 0, 1));
  CHECK(all.size() == 10);
  CHECK(all.back() == "m10");
  CHECK(at_end == position_bytes(10, 10));
  runtime::sync_wait(fill(nats.port(), 13));  // m11..m13 arrive after the job's first open
  // a restart from a checkpoint taken after m4, with the bound fixed at 10 by the first open
  auto [rest, end] = runtime::sync_wait(read_source(url, true, position_bytes(4, 10), 1000, 0, 1));
  CHECK(rest == std::vector<std::string>{"m5", "m6", "m7", "m8", "m9", "m10"});
  CHECK(end == position_bytes(10, 10));
  // unbounded from 10: the new messages
  std::vector<std::byte> unbounded = position_bytes(10, 0);
  unbounded.back() = std::byte{0};
  auto [fresh, after] = runtime::sync_wait(read_source(url, false, unbounded, 3, 0, 1));
  CHECK(fresh == std::vector<std::string>{"m11", "m12", "m13"});
}

TEST_CASE("two jetstream source tasks split the stream by sequence modulo parallelism") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  runtime::sync_wait(fill(nats.port(), 6));
  const auto url = url_of(nats.port(), "S");
  auto [even, p0] = runtime::sync_wait(read_source(url, true, {}, 1000, 0, 2));
  auto [odd, p1] = runtime::sync_wait(read_source(url, true, {}, 1000, 1, 2));
  CHECK(even == std::vector<std::string>{"m2", "m4", "m6"});
  CHECK(odd == std::vector<std::string>{"m1", "m3", "m5"});
}

namespace {

// Two sinks, task 7 of a job "j" each, runs r1 and r2, publish a batch each into subject "out".
task<std::string> two_runs_publish(std::uint16_t port) {
  const auto url = url_of(port, "out");
  dataflow::connector_context ctx;
  ctx.job = "j";
  ctx.task = 7;
  const std::vector<std::string> runs{"r1", "r2"};
  for (const std::string& run : runs) {
    auto sink = nats::make_jetstream_sink(ctx, url);
    (co_await sink->recover(dataflow::recovery_of({}, run))).value();
    const std::vector<std::string> records{"a" + run, "b" + run};
    for (const std::string& r : records) (co_await sink->write(r)).value();
    (void)(co_await sink->precommit(1)).value();
    (co_await sink->commit(1)).value();
    co_await sink->close();
  }
  auto [records, position] = co_await read_source(url_of(port, "out"), true, {}, 1000, 0, 1);
  (void)position;
  std::string all;
  for (const auto& r : records) all += r + " ";
  co_return all;
}

task<std::string> sink_commits_then_recovers(std::uint16_t port) {
  const auto url = url_of(port, "out");
  dataflow::connector_context ctx;
  ctx.job = "j";
  ctx.task = 7;
  auto sink = nats::make_jetstream_sink(ctx, url);
  (co_await sink->recover(dataflow::recovery_of({}, "r1"))).value();  // creates stream "out"
  for (const char* r : {"a", "b", "c"}) (co_await sink->write(r)).value();
  auto at1 = (co_await sink->precommit(1)).value();
  (void)at1;
  (co_await sink->write("d")).value();
  auto at2 = (co_await sink->precommit(2)).value();
  (co_await sink->commit(1)).value();  // a, b, c published; then the task "crashes" before commit(2)
  co_await sink->close();
  auto again = nats::make_jetstream_sink(ctx, url);
  (co_await again->recover(dataflow::recovery_of(at2, "r1"))).value();  // publishes batch 1 again (dropped as duplicates) and batch 2
  (co_await again->commit(2)).value();     // idempotent: nothing left
  co_await again->close();
  auto c = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  auto info = (co_await nats::get_stream_info(*c, "out")).value();
  co_await c->close();
  auto [records, position] = co_await read_source(url_of(port, "out"), true, {}, 1000, 0, 1);
  (void)position;
  std::string all;
  for (const auto& r : records) all += r;
  co_return all + " messages=" + std::to_string(info.messages);
}

// A record of the server's max_payload, and one that fits with the message id's headers.
task<std::string> sink_refuses_a_record_too_large(std::uint16_t port) {
  dataflow::connector_context ctx;
  ctx.job = "j";
  ctx.task = 7;
  auto sink = nats::make_jetstream_sink(ctx, url_of(port, "big"));
  (co_await sink->recover(dataflow::recovery_of({}, "r1"))).value();
  auto c = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
  const std::size_t max_payload = c->max_payload();
  co_await c->close();
  const std::string too_large(max_payload, 'x');
  auto refused = co_await sink->write(too_large);
  std::string out = refused ? "accepted" : refused.error().message();
  const std::string fits(max_payload - 200, 'y');
  auto written = co_await sink->write(fits);
  if (!written) out += " | " + written.error().message();
  (void)(co_await sink->precommit(1)).value();
  auto committed = co_await sink->commit(1);
  out += committed ? " | committed" : " | " + committed.error().message();
  co_await sink->close();
  co_return out;
}

task<std::string> source_error_when_server_dies(std::uint16_t port, test::nats_server* server) {
  dataflow::connector_context ctx;
  auto source = nats::make_jetstream_source(ctx, url_of(port, "S"), false);
  (co_await source->open()).value();
  vector_collector got;
  dataflow::source_output<std::string> out(got);
  std::string error;
  for (int turns = 0; turns < 100000 && error.empty(); ++turns) {
    auto status = co_await source->read(out, 100);
    if (!status) {
      error = status.error().message();
      break;
    }
    if (got.records.size() == 3 && server->running()) server->kill();  // read everything, then the server dies
    if (status.value() == dataflow::read_status::idle) {
      const bool woke = co_await runtime::with_timeout(source->wait_readable(), 20s);
      if (!woke) error = "hang";
    }
  }
  co_await source->close();
  co_return error;
}

}  // namespace

TEST_CASE("the jetstream sink publishes a checkpoint's records once even when commit and recover both publish it") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  CHECK(runtime::sync_wait(sink_commits_then_recovers(nats.port())) == "abcd messages=4");
}

TEST_CASE("jetstream sinks of two jobs of one name (two runs) into one subject both publish: message ids carry the run") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  // Ids of the job's name and task only: r2's batch had r1's ids and JetStream dropped it.
  CHECK(runtime::sync_wait(two_runs_publish(nats.port())) == "ar1 br1 ar2 br2 ");
}

TEST_CASE("a jetstream source whose server stops mid-fetch fails with an error naming the server and stream") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  runtime::sync_wait(fill(nats.port(), 3));
  const std::string error = runtime::sync_wait(source_error_when_server_dies(nats.port(), &nats));
  INFO(error);
  CHECK(error.find("jetstream source S on 127.0.0.1:" + std::to_string(nats.port())) != std::string::npos);
  CHECK(error.find("the server closed the connection") != std::string::npos);
}

TEST_CASE("a jetstream sink refuses a record larger than one message at write naming it and publishes one that fits") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  const std::string out = runtime::sync_wait(sink_refuses_a_record_too_large(nats.port()));
  INFO(out);
  CHECK(out.find("jetstream sink big on 127.0.0.1:" + std::to_string(nats.port()) + ": a record of ") == 0);
  CHECK(out.find(" bytes (xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...) does not fit in one message: the server's "
                 "max_payload is ") != std::string::npos);
  CHECK(out.find(" | committed") != std::string::npos);
  CHECK(out.find("accepted") == std::string::npos);
}

namespace {

// One sink's first recover, as task `task` of job "j", run "r1".
task<std::string> recover_sink(dataflow::connector_context ctx, nats::nats_url url) {
  auto sink = nats::make_jetstream_sink(ctx, url);
  io::result<void> r = co_await sink->recover(dataflow::recovery_of({}, "r1"));
  co_await sink->close();
  co_return r ? std::string("ok") : r.error().message();
}

// Eight sinks recover at once into a subject no stream stores yet: each finds none, and all but the
// first to reach the server are refused the create ("subjects overlap with an existing stream").
task<std::vector<std::string>> sinks_recover_at_once(std::uint16_t port, std::size_t sinks) {
  std::vector<task<std::string>> all;
  for (std::size_t i = 0; i < sinks; ++i) {
    dataflow::connector_context ctx;
    ctx.job = "j";
    ctx.task = static_cast<std::uint32_t>(i);
    all.push_back(recover_sink(ctx, url_of(port, "together")));
  }
  co_return co_await runtime::when_all(std::move(all));
}

}  // namespace

// Two jobs into one subject once failed so: one job's sink made the stream between the other's
// lookup and its create.
TEST_CASE("jetstream sinks that find no stream and create it at once all recover: the losers take the one made") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  const std::vector<std::string> results = runtime::sync_wait(sinks_recover_at_once(nats.port(), 8));
  CHECK(results == std::vector<std::string>(8, "ok"));
}
