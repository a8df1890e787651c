// GCC 12 reports a false -Wstringop-overflow inside std::string copies inlined at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#include "tsan_skip.hpp"
#include <sluice/kafka/kafka.hpp>
#include <sluice/runtime/engine.hpp>

#include "mock_cluster.hpp"

#include <catch2/catch.hpp>

#include <librdkafka/rdkafka.h>

#include <cstdio>
#include <set>

namespace rt = sluice::runtime;
namespace df = sluice::dataflow;
namespace sk = sluice::kafka;
using namespace sluice::kafka::test;

namespace {

// Kafka protocol API keys (rdkafka_protocol.h is not installed).
constexpr std::int16_t api_produce = 0;
constexpr std::int16_t api_add_partitions_to_txn = 24;
constexpr std::int16_t api_end_txn = 26;

// A start of run `run` from a checkpoint's bytes (empty: a fresh start).
rt::task<std::string> recover(df::sink_connector<std::string>* s, std::vector<std::byte> bytes, std::string run) {
  auto r = co_await s->recover(df::recovery_of(std::move(bytes), std::move(run)));
  co_return r ? std::string() : r.error().message();
}
rt::task<std::string> recover(df::sink_connector<std::string>* s, std::vector<std::byte> bytes) {
  return recover(s, std::move(bytes), "r1");
}

// Writes `n` records "<prefix><i>" and precommits checkpoint `id`; returns its bytes.
rt::task<std::vector<std::byte>> write_and_precommit(df::sink_connector<std::string>* s, std::string prefix,
                                                     int n, std::uint64_t id) {
  for (int i = 0; i < n; ++i) {
    std::string record = prefix + std::to_string(i);
    auto w = co_await s->write(record);
    if (!w) throw std::runtime_error(w.error().message());
  }
  auto p = co_await s->precommit(id);
  if (!p) throw std::runtime_error(p.error().message());
  co_return std::move(*p);
}

rt::task<std::string> commit(df::sink_connector<std::string>* s, std::uint64_t id) {
  auto r = co_await s->commit(id);
  co_return r ? std::string() : r.error().message();
}

std::multiset<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("a kafka sink's checkpoint is in the topic exactly once when both commit and a later recover try") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("out", 2);
  if (auto why = transactions_unsupported(cluster.bootstrap(), "out"); !why.empty()) {
    std::printf("sluice-test-skipped: %s\n", why.c_str());
    return;
  }
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "out"};
  std::vector<std::byte> bytes;
  {
    auto sink = sk::make_kafka_sink(o, context("job", 0, 1));
    REQUIRE(eng.block_on(recover(sink.get(), {})).empty());
    bytes = eng.block_on(write_and_precommit(sink.get(), "a", 50, 1));
    REQUIRE(eng.block_on(commit(sink.get(), 1)).empty());
    REQUIRE(eng.block_on(commit(sink.get(), 1)).empty());  // idempotent
    eng.block_on(sink->close());
  }
  std::vector<std::byte> bytes2;
  {
    // A restart from checkpoint 1 (already committed) writes checkpoint 2, then dies before its commit;
    // records staged after checkpoint 2 are lost with it (the replay would write them again).
    auto sink = sk::make_kafka_sink(o, context("job", 0, 1));
    REQUIRE(eng.block_on(recover(sink.get(), bytes)).empty());
    bytes2 = eng.block_on(write_and_precommit(sink.get(), "b", 30, 2));
    (void)eng.block_on(write_and_precommit(sink.get(), "c", 5, 3));
  }
  {
    auto sink = sk::make_kafka_sink(o, context("job", 0, 1));
    REQUIRE(eng.block_on(recover(sink.get(), bytes2)).empty());  // commits checkpoint 2
    eng.block_on(sink->close());
  }
  {
    auto sink = sk::make_kafka_sink(o, context("job", 0, 1));
    REQUIRE(eng.block_on(recover(sink.get(), bytes2)).empty());  // a second restart: nothing again
    eng.block_on(sink->close());
  }
  auto got = read_committed(cluster.bootstrap(), "out", 2, 80);
  std::multiset<std::string> want;
  for (int i = 0; i < 50; ++i) want.insert("a" + std::to_string(i));
  for (int i = 0; i < 30; ++i) want.insert("b" + std::to_string(i));
  CHECK(as_set(got) == want);
}

TEST_CASE("kafka sinks of two tasks commit with their own transactional ids and markers") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("out", 3);
  if (auto why = transactions_unsupported(cluster.bootstrap(), "out"); !why.empty()) {
    std::printf("sluice-test-skipped: %s\n", why.c_str());
    return;
  }
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "out"};
  auto s0 = sk::make_kafka_sink(o, context("job", 0, 2));
  auto s1 = sk::make_kafka_sink(o, context("job", 1, 2));
  REQUIRE(eng.block_on(recover(s0.get(), {})).empty());
  REQUIRE(eng.block_on(recover(s1.get(), {})).empty());
  (void)eng.block_on(write_and_precommit(s0.get(), "x", 20, 1));
  auto b1 = eng.block_on(write_and_precommit(s1.get(), "y", 20, 1));
  REQUIRE(eng.block_on(commit(s0.get(), 1)).empty());
  eng.block_on(s1->close());  // task 1 dies before its commit
  auto again = sk::make_kafka_sink(o, context("job", 1, 2));
  REQUIRE(eng.block_on(recover(again.get(), b1)).empty());  // task 0's marker does not hide task 1's batch
  eng.block_on(again->close());
  eng.block_on(s0->close());
  CHECK(read_committed(cluster.bootstrap(), "out", 3, 40).size() == 40);
}

TEST_CASE("retriable broker errors on a kafka sink's commit (Produce, AddPartitionsToTxn) are retried into one success without duplicates") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("out", 1);
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "out"};
  auto sink = sk::make_kafka_sink(o, context("job", 0, 1));
  REQUIRE(eng.block_on(recover(sink.get(), {})).empty());
  rd_kafka_mock_push_request_errors(cluster.get(), api_produce, 2, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
  rd_kafka_mock_push_request_errors(cluster.get(), api_add_partitions_to_txn, 1,
                                    RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS);
  (void)eng.block_on(write_and_precommit(sink.get(), "p", 40, 1));
  CHECK(eng.block_on(commit(sink.get(), 1)).empty());
  eng.block_on(sink->close());
  auto got = read_committed(cluster.bootstrap(), "out", 1, 40);
  std::multiset<std::string> want;
  for (int i = 0; i < 40; ++i) want.insert("p" + std::to_string(i));
  CHECK(as_set(got) == want);
}

TEST_CASE("a fatal broker error on a kafka sink's EndTxn fails the commit, naming it, and recovery commits the batch once") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("out", 1);
  if (auto why = transactions_unsupported(cluster.bootstrap(), "out"); !why.empty()) {
    std::printf("sluice-test-skipped: %s\n", why.c_str());
    return;
  }
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "out"};
  auto sink = sk::make_kafka_sink(o, context("job", 0, 1));
  REQUIRE(eng.block_on(recover(sink.get(), {})).empty());
  rd_kafka_mock_push_request_errors(cluster.get(), api_end_txn, 1, RD_KAFKA_RESP_ERR_INVALID_TXN_STATE);
  auto bytes = eng.block_on(write_and_precommit(sink.get(), "q", 25, 1));
  std::string failure = eng.block_on(commit(sink.get(), 1));
  CHECK(failure.find("commit of checkpoint 1") != std::string::npos);
  eng.block_on(sink->close());
  auto again = sk::make_kafka_sink(o, context("job", 0, 1));
  REQUIRE(eng.block_on(recover(again.get(), bytes)).empty());
  eng.block_on(again->close());
  auto got = read_committed(cluster.bootstrap(), "out", 1, 25);
  std::multiset<std::string> want;
  for (int i = 0; i < 25; ++i) want.insert("q" + std::to_string(i));
  CHECK(as_set(got) == want);
}

TEST_CASE("kafka sinks of two jobs of the same name (two runs) commit side by side without fencing each other") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("out", 1);
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "out"};
  const auto ctx = context("wordcount", 0, 1);
  CHECK(sk::transactional_id(ctx, "a1") != sk::transactional_id(ctx, "b2"));
  CHECK(sk::marker_group(ctx, "a1") != sk::marker_group(ctx, "b2"));
  auto first = sk::make_kafka_sink(o, ctx);
  auto second = sk::make_kafka_sink(o, ctx);
  REQUIRE(eng.block_on(recover(first.get(), {}, "a1")).empty());
  // With one transactional id (the job's name and task, as before runs), this init fenced `first`.
  REQUIRE(eng.block_on(recover(second.get(), {}, "b2")).empty());
  (void)eng.block_on(write_and_precommit(first.get(), "a", 20, 1));
  (void)eng.block_on(write_and_precommit(second.get(), "b", 20, 1));
  CHECK(eng.block_on(commit(first.get(), 1)).empty());
  CHECK(eng.block_on(commit(second.get(), 1)).empty());
  eng.block_on(first->close());
  eng.block_on(second->close());
  auto got = read_committed(cluster.bootstrap(), "out", 1, 40);
  std::multiset<std::string> want;
  for (int i = 0; i < 20; ++i) want.insert("a" + std::to_string(i));
  for (int i = 0; i < 20; ++i) want.insert("b" + std::to_string(i));
  CHECK(as_set(got) == want);
}

namespace {

rt::task<std::string> write_one(df::sink_connector<std::string>* s, std::string record) {
  auto w = co_await s->write(record);
  co_return w ? std::string() : w.error().message();
}

// What librdkafka's produce says of a value of `bytes` bytes (it checks the size before queueing).
rd_kafka_resp_err_t produce_error(const std::string& brokers, std::size_t bytes) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), errstr, sizeof errstr);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  REQUIRE(rk != nullptr);
  std::string value(bytes, 'v');
  const rd_kafka_resp_err_t err =
      rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("out"), RD_KAFKA_V_VALUE(value.data(), value.size()),
                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE);
  rd_kafka_destroy(rk);
  return err;
}

}  // namespace

// librdkafka refuses a message above message.max.bytes (framing included) with MSG_SIZE_TOO_LARGE,
// at produce: in the commit, when the record is in the checkpoint already and every rerun's
// recovery fails on it again. The sink refuses it at write, naming it.
TEST_CASE("a kafka sink refuses a record larger than message.max.bytes at write naming it and takes one that fits") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster cluster;
  cluster.create_topic("out", 1);
  rt::engine eng(one_executor());
  sk::kafka_options o{.brokers = cluster.bootstrap(), .topic = "out"};
  auto sink = sk::make_kafka_sink(o, context("job", 0, 1));
  REQUIRE(eng.block_on(recover(sink.get(), {})).empty());
  const std::size_t max_message_bytes = 1000000;  // librdkafka's default
  const std::string refused = eng.block_on(write_one(sink.get(), std::string(max_message_bytes - 35, 'x')));
  CHECK(refused.find("kafka sink 'out' (transactional.id ") == 0);
  CHECK(refused.find("a record of 999965 bytes (xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...) is larger than one "
                     "message: message.max.bytes is 1000000, framing included") != std::string::npos);
  CHECK(eng.block_on(write_one(sink.get(), std::string(max_message_bytes - 36, 'y'))).empty());
  // The same limit as librdkafka's own.
  CHECK(produce_error(cluster.bootstrap(), max_message_bytes - 35) == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  CHECK(produce_error(cluster.bootstrap(), max_message_bytes - 36) == RD_KAFKA_RESP_ERR_NO_ERROR);
  // The one that fits is committed (where the cluster keeps transactional offsets: the marker).
  if (transactions_unsupported(cluster.bootstrap(), "out").empty()) {
    (void)eng.block_on(write_and_precommit(sink.get(), "z", 1, 1));
    CHECK(eng.block_on(commit(sink.get(), 1)).empty());
  }
  eng.block_on(sink->close());
}
