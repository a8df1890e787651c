#include <sluice/nats/client.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/nats/jetstream.hpp>
#include <sluice/runtime/sync_wait.hpp>

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
  // first run: 4 records, then "crash" at that position
  auto [first, at] = runtime::sync_wait(read_source(url, true, {}, 4, 0, 1));
  REQUIRE(first.size() >= 4);
  first.resize(4);
  // the position after m4: take it from a run that stops exactly there
  auto [head, at4] = runtime::sync_wait(read_source(url, true, {}, 4, 0, 1));
  (void)head;
  (void)at;
  // more messages arrive after the first open: the bound stays at 10 for the restarted job
  runtime::sync_wait(fill(nats.port(), 0));
  auto [rest, end] = runtime::sync_wait(read_source(url, true, at4, 1000, 0, 1));
  (void)end;
  REQUIRE(!rest.empty());
  CHECK(rest.back() == "m10");
  CHECK(rest.size() + head.size() == 10);
  CHECK(head.back() == "m" + std::to_string(head.size()));
  CHECK(rest.front() == "m" + std::to_string(head.size() + 1));
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
