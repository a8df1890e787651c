// Throughput against a real nats-server, not a timed test: hidden ([.]), run by hand:
//   build/release/tests/nats_tests "[.nats-bench]"   (SLUICE_NATS_BENCH_N=records, default 1000000)
#include <sluice/nats/client.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/nats/jetstream.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/nats_server.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

using namespace sluice;
using runtime::task;

namespace {

struct counting_collector final : dataflow::collector<std::string> {
  std::size_t n = 0;
  void collect(const std::string&) override { ++n; }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

task<int> bench(std::uint16_t port, std::size_t n) {
  const std::string payload = "0123456789abcdef";
  {
    auto c = (co_await nats::connection::connect(io::address::loopback_v4(port))).value();
    const auto t = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) (co_await c->publish("plain", payload)).value();
    (co_await c->flush()).value();
    std::printf("plain PUB, no acks, no subscriber: %zu msgs in %.2f s = %.0f msgs/s\n", n, seconds_since(t), n / seconds_since(t));
    co_await c->close();
  }
  const auto url = nats::parse_url("nats://127.0.0.1:" + std::to_string(port) + "/bench").value();
  {
    dataflow::connector_context ctx;
    ctx.job = "bench";
    auto sink = nats::make_jetstream_sink(ctx, url);
    (co_await sink->recover({})).value();
    for (std::size_t i = 0; i < n; ++i) (co_await sink->write(payload)).value();
    auto bytes = (co_await sink->precommit(1)).value();
    (void)bytes;
    const auto t = std::chrono::steady_clock::now();
    (co_await sink->commit(1)).value();
    std::printf("jetstream_sink commit (1024 in flight, every PubAck awaited): %zu msgs in %.2f s = %.0f msgs/s\n", n,
                seconds_since(t), n / seconds_since(t));
    co_await sink->close();
  }
  {
    dataflow::connector_context ctx;
    auto source = nats::make_jetstream_source(ctx, url, true);
    const auto t = std::chrono::steady_clock::now();
    (co_await source->open()).value();
    counting_collector got;
    dataflow::source_output<std::string> out(got);
    for (;;) {
      auto status = (co_await source->read(out, 1024)).value();
      if (status == dataflow::read_status::end) break;
      if (status == dataflow::read_status::idle) co_await source->wait_readable();
    }
    std::printf("jetstream_source (bounded, parallelism 1): %zu msgs in %.2f s = %.0f msgs/s\n", got.n, seconds_since(t),
                got.n / seconds_since(t));
    co_await source->close();
  }
  co_return 0;
}

}  // namespace

TEST_CASE("nats throughput against a real server", "[.nats-bench]") {
  SLUICE_SKIP_WITHOUT_NATS();
  test::temp_dir dir;
  test::nats_server nats(dir.path());
  nats.start();
  const char* env = std::getenv("SLUICE_NATS_BENCH_N");
  const std::size_t n = env != nullptr ? std::strtoull(env, nullptr, 10) : 1000000;
  CHECK(runtime::sync_wait(bench(nats.port(), n)) == 0);
}
