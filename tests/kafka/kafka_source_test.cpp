// GCC 12 reports a false -Wstringop-overflow inside std::string copies inlined at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#include "tsan_skip.hpp"
#include <sluice/kafka/kafka.hpp>
#include <sluice/runtime/engine.hpp>

#include "mock_cluster.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

namespace rt = sluice::runtime;
namespace df = sluice::dataflow;
namespace sk = sluice::kafka;
using namespace sluice::kafka::test;

namespace {

// Reads until `stop_after` records were emitted (or end); returns the status of the last read.
rt::task<df::read_status> drain(df::source_connector<std::string>* src, df::source_output<std::string>* out,
                                std::size_t stop_after) {
  for (;;) {
    auto r = co_await src->read(*out, 7);
    if (!r) throw std::runtime_error(r.error().message());
    df::read_status s = *r;
    if (s == df::read_status::end) co_return s;
    if (out->records() >= stop_after) co_return s;
    if (s == df::read_status::idle) co_await src->wait_readable();
  }
}

rt::task<void> open_or_throw(df::source_connector<std::string>* src) {
  auto r = co_await src->open();
  if (!r) throw std::runtime_error(r.error().message());
}

std::vector<std::string> numbered(std::size_t n) {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back("r" + std::to_string(i));
  return v;
}

}  // namespace

TEST_CASE("a bounded kafka source stops at the high watermarks of its first start and resumes from a position") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("in", 3);
  produce(cluster.bootstrap(), "in", numbered(300), [](std::size_t i) { return i % 3; });
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "in", .bounded = true};

  std::vector<std::byte> pos;
  std::vector<std::string> first;
  {
    auto src = sk::make_kafka_source(o, context("j", 0, 1));
    vector_collector<std::string> c;
    df::source_output<std::string> out(c);
    eng.block_on(open_or_throw(src.get()));
    auto s = eng.block_on(drain(src.get(), &out, 100));
    REQUIRE(s != df::read_status::end);
    pos = src->position();
    first = c.records;
    eng.block_on(src->close());
  }
  // Records written after the first start are past the bound: the resumed source does not read them.
  produce(cluster.bootstrap(), "in", {"late0", "late1", "late2"}, [](std::size_t i) { return i; });
  auto src = sk::make_kafka_source(o, context("j", 0, 1));
  src->restore(pos);
  vector_collector<std::string> c;
  df::source_output<std::string> out(c);
  eng.block_on(open_or_throw(src.get()));
  auto s = eng.block_on(drain(src.get(), &out, 1000000));
  CHECK(s == df::read_status::end);
  eng.block_on(src->close());

  std::vector<std::string> all = first;
  all.insert(all.end(), c.records.begin(), c.records.end());
  std::multiset<std::string> got(all.begin(), all.end());
  auto want = numbered(300);
  CHECK(got == std::multiset<std::string>(want.begin(), want.end()));  // none lost, none twice, no late ones
  CHECK(first.size() >= 100);
}

TEST_CASE("kafka source tasks split the partitions by partition modulo parallelism") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("in", 4);
  produce(cluster.bootstrap(), "in", numbered(400), [](std::size_t i) { return i % 4; });
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "in", .bounded = true};
  std::multiset<std::string> got;
  for (std::size_t t = 0; t < 2; ++t) {
    auto src = sk::make_kafka_source(o, context("j", t, 2));
    vector_collector<std::string> c;
    df::source_output<std::string> out(c);
    eng.block_on(open_or_throw(src.get()));
    auto s = eng.block_on(drain(src.get(), &out, 1000000));
    CHECK(s == df::read_status::end);
    CHECK(c.records.size() == 200);
    for (auto& r : c.records) {
      std::size_t i = std::stoul(r.substr(1));
      CHECK(i % 4 % 2 == t);  // partition i % 4 belongs to task (i % 4) % 2
      got.insert(r);
    }
    auto p = sk::decode_position(src->position());
    CHECK(p.size() == 2);
    eng.block_on(src->close());
  }
  CHECK(got.size() == 400);
}

TEST_CASE("kafka URLs parse into brokers, topic and bounded, and the identity names the topic but not the brokers") {
  auto o = sk::parse_kafka_url("kafka://a:1,b:2/orders?bounded");
  CHECK(o.brokers == "a:1,b:2");
  CHECK(o.topic == "orders");
  CHECK(o.bounded);
  auto spec = sk::kafka_source_spec("kafka://a:1/orders?bounded");
  CHECK(spec.identity == std::vector<std::string>{"source=kafka", "kafka.topic=orders", "kafka.bounded"});
  CHECK(sk::kafka_sink_spec("kafka://x:9/out").identity == std::vector<std::string>{"sink=kafka", "kafka.topic=out"});
  CHECK_THROWS_AS(sk::parse_kafka_url("kafka://a:1"), std::invalid_argument);
  CHECK_THROWS_AS(sk::parse_kafka_url("nats://a:1/t"), std::invalid_argument);
  CHECK_THROWS_AS(sk::kafka_sink_spec("kafka://a:1/t?bounded"), std::invalid_argument);
}

namespace {
rt::task<df::read_status> read_once(df::source_connector<std::string>* src, df::source_output<std::string>* out) {
  auto r = co_await src->read(*out, 100);
  if (!r) throw std::runtime_error(r.error().message());
  co_return *r;
}
}  // namespace

TEST_CASE("an unbounded kafka source returns idle on a quiet topic and wait_readable wakes when records arrive") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("in", 2);
  rt::engine eng(one_executor());
  auto src = sk::make_kafka_source({.brokers = cluster.bootstrap(), .topic = "in"}, context("j", 0, 1));
  vector_collector<std::string> c;
  df::source_output<std::string> out(c);
  eng.block_on(open_or_throw(src.get()));
  CHECK(eng.block_on(read_once(src.get(), &out)) == df::read_status::idle);
  CHECK(c.records.empty());
  produce(cluster.bootstrap(), "in", numbered(10), [](std::size_t i) { return i % 2; });
  auto s = eng.block_on(drain(src.get(), &out, 10));  // waits through wait_readable until all 10 came
  CHECK(s != df::read_status::end);
  CHECK(c.records.size() == 10);
  auto pos = sk::decode_position(src->position());
  CHECK(pos.at(0).next == 5);
  CHECK(pos.at(1).next == 5);
  CHECK(pos.at(0).bound == -1);
  eng.block_on(src->close());
}

TEST_CASE("a kafka source refuses a position it cannot decode, naming the connector") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  auto src = sk::make_kafka_source({.brokers = "x:1", .topic = "in"}, context("j", 0, 1));
  std::string bad = "0 five -1\n";
  auto bytes = std::as_bytes(std::span(bad));
  CHECK_THROWS_WITH(src->restore(std::vector<std::byte>(bytes.begin(), bytes.end())),
                    Catch::Contains("kafka source: position bytes do not decode"));
}
