// GCC 12 reports a false -Wstringop-overflow inside std::string copies inlined at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
// Not a test: a measurement, hidden from ctest ([.bench]); run it by name:
//   build/release/tests/kafka_tests "[.bench]"
// Records/s on the mock cluster for the sink's commit path and the source, beside a plain
// librdkafka producer and consumer loop.
#include "tsan_skip.hpp"
#include <sluice/kafka/kafka.hpp>
#include <sluice/runtime/engine.hpp>

#include "mock_cluster.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>

namespace rt = sluice::runtime;
namespace df = sluice::dataflow;
namespace sk = sluice::kafka;
using namespace sluice::kafka::test;

namespace {

using clock_type = std::chrono::steady_clock;
double per_second(std::size_t n, clock_type::time_point t0) {
  return n / std::chrono::duration<double>(clock_type::now() - t0).count();
}

rt::task<std::size_t> sink_run(df::sink_connector<std::string>* s, std::size_t n) {
  auto r = co_await s->recover({});
  if (!r) throw std::runtime_error(r.error().message());
  std::string value(100, 'v');
  for (std::size_t i = 0; i < n; ++i) (void)co_await s->write(value);
  (void)co_await s->precommit(1);
  auto c = co_await s->commit(1);
  if (!c) throw std::runtime_error(c.error().message());
  co_return n;
}

rt::task<std::size_t> source_run(df::source_connector<std::string>* s, df::source_output<std::string>* out) {
  auto o = co_await s->open();
  if (!o) throw std::runtime_error(o.error().message());
  for (;;) {
    auto r = co_await s->read(*out, 256);
    if (!r) throw std::runtime_error(r.error().message());
    if (*r == df::read_status::end) co_return out->records();
    if (*r == df::read_status::idle) co_await s->wait_readable();
  }
}

// A plain consumer loop: assign all partitions from the beginning, poll until `n` records came.
std::size_t plain_consume(const std::string& brokers, const std::string& topic, int partitions, std::size_t n) {
  char errstr[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "group.id", "plain", errstr, sizeof errstr);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
  rd_kafka_poll_set_consumer(rk);
  auto* list = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p)
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  std::size_t got = 0;
  while (got < n) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 5000);
    if (m == nullptr) break;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) ++got;
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return got;
}

struct counting : df::collector<std::string> {
  void collect(const std::string&) override {}
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};

}  // namespace

TEST_CASE("kafka throughput on the mock cluster, beside plain librdkafka loops", "[.bench]") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  const std::size_t n = 100000;
  mock_cluster cluster;
  cluster.create_topic("plain", 4);
  cluster.create_topic("sink", 4);
  std::vector<std::string> values(n, std::string(100, 'v'));

  auto t0 = clock_type::now();
  produce(cluster.bootstrap(), "plain", values, [](std::size_t i) { return i % 4; });
  double plain_produce = per_second(n, t0);

  t0 = clock_type::now();
  std::size_t got = plain_consume(cluster.bootstrap(), "plain", 4, n);
  double plain_consume_rate = per_second(got, t0);
  std::printf("plain consumer read %zu of %zu\n", got, n);
  CHECK(got == n);  // a rate over fewer records than produced would be no rate

  rt::engine eng(one_executor());
  auto sink = sk::make_kafka_sink({.brokers = cluster.bootstrap(), .topic = "sink"}, context("bench", 0, 1));
  t0 = clock_type::now();
  eng.block_on(sink_run(sink.get(), n));
  double sink_rate = per_second(n, t0);
  eng.block_on(sink->close());

  auto src = sk::make_kafka_source({.brokers = cluster.bootstrap(), .topic = "plain", .bounded = true},
                                   context("bench", 0, 1));
  counting c;
  df::source_output<std::string> out(c);
  t0 = clock_type::now();
  std::size_t read = eng.block_on(source_run(src.get(), &out));
  double source_rate = per_second(read, t0);
  eng.block_on(src->close());
  std::printf("source read %zu of %zu\n", read, n);
  CHECK(read == n);  // bounded at the high watermarks: every record produced, once

  std::printf("kafka mock cluster, %zu records of 100 bytes, 4 partitions:\n", n);
  std::printf("  plain producer loop (produce + flush):     %10.0f records/s\n", plain_produce);
  std::printf("  kafka_sink write+precommit+commit (1 txn): %10.0f records/s\n", sink_rate);
  std::printf("  plain consumer loop (consumer_poll):       %10.0f records/s\n", plain_consume_rate);
  std::printf("  kafka_source open+read to its bound:       %10.0f records/s\n", source_rate);
}
