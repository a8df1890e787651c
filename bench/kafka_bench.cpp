// kafka: records/s into and out of librdkafka's mock cluster through the connectors
// (kafka/kafka.hpp), each beside a plain librdkafka loop on the same cluster, in the same run.
//
// - IN. Figure: kafka_sink's write() + precommit() + commit() of --records 100-byte records, a
//   checkpoint every --per-checkpoint records (commit: one transaction with the marker offset).
//   Baseline: a plain transactional producer (same transactional.id set-up, idempotence on):
//   begin_transaction, rd_kafka_producev of each record (RD_KAFKA_MSG_F_COPY, the partitioner
//   spreading keyless records), commit_transaction every --per-checkpoint records; no marker offset.
//   Both first commit one transaction of one record, outside the timing: a producer's first
//   transaction on the mock takes about 1 s (the next ones milliseconds), which would
//   otherwise be most of the figure and of the baseline.
// - OUT. Figure: a bounded kafka_source (one task, all 4 partitions) opened and read to its bound,
//   --source-records records.
//   Baseline: a plain consumer (the topic's metadata, rd_kafka_assign from the beginning,
//   rd_kafka_consumer_poll) reading the same topic until it has every record.
// - The cluster is librdkafka's mock (rdkafka_mock.h) in this process, one broker, as the tests run
//   it (tests/kafka/mock_cluster.hpp): there is no broker to install, and no network but loopback.
//   The mock answers without a log or replication, so the ratio says what the connectors cost over
//   librdkafka, not what a real broker would sustain.

#include "bench.hpp"
#include "connector_bench.hpp"

#include <kafka/mock_cluster.hpp>

#include <sluice/kafka/kafka.hpp>
#include <sluice/runtime/engine.hpp>

#include <fmt/core.h>

#include <librdkafka/rdkafka.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::bench {
namespace {

constexpr int partitions = 4;
const std::string value(100, 'v');

void check(rd_kafka_error_t* e, const std::string& step) {
  if (e == nullptr) return;
  const std::string why = rd_kafka_error_string(e);
  rd_kafka_error_destroy(e);
  throw std::runtime_error("kafka bench: plain producer: " + step + ": " + why);
}

rd_kafka_t* client(rd_kafka_type_t type, const std::vector<std::pair<std::string, std::string>>& settings) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (const auto& [k, v] : settings) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw std::runtime_error(fmt::format("kafka bench: {}={}: {}", k, v, errstr));
    }
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
  if (rk == nullptr) throw std::runtime_error(std::string("kafka bench: rd_kafka_new: ") + errstr);
  return rk;
}

class kafka_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "kafka"; }
  std::string_view description() const noexcept override {
    return "records/s into librdkafka's mock cluster through the transactional sink's commit path and out through "
           "the source, vs plain librdkafka producer (transactional) and consumer loops";
  }
  std::vector<option> options() override {
    return {{"--records", "100-byte records per measurement", &records_},
            {"--per-checkpoint", "records per checkpoint, one transaction each (both)", &per_checkpoint_},
            {"--source-records", "100-byte records read per measurement out of the cluster", &source_records_}};
  }

  void run(const common_options& common, const reporter& out) override {
    kafka::test::mock_cluster cluster;
    brokers_ = cluster.bootstrap();
    for (const char* topic : {"in-sink", "in-plain", "out"}) cluster.create_topic(topic, partitions);
    for (std::uint64_t filled = 0; filled < source_records_;) {  // in slices: the helper takes a vector
      const std::uint64_t slice = std::min<std::uint64_t>(100'000, source_records_ - filled);
      kafka::test::produce(brokers_, "out", std::vector<std::string>(slice, value), [](std::size_t i) { return i % partitions; });
      filled += slice;
    }
    runtime::engine engine({.executors = 1, .handle_signals = false});
    const double n = static_cast<double>(records_);

    auto in = measure_paired(
        common.runs, [&] { return n / sink_seconds(engine); }, [&] { return n / plain_produce_seconds(); });
    report(out, common, "in", "kafka_sink write+precommit+commit", "plain transactional producer", in);
    const double m = static_cast<double>(source_records_);
    auto outr = measure_paired(
        common.runs, [&] { return m / source_seconds(engine); }, [&] { return m / plain_consume_seconds(); });
    report(out, common, "out", "bounded kafka_source", "plain consumer poll loop", outr);
  }

 private:
  double sink_seconds(runtime::engine& engine) {
    auto sink = kafka::make_kafka_sink({.brokers = brokers_, .topic = "in-sink"},
                                       kafka::test::context(fmt::format("bench{}", runs_++), 0, 1));
    connectors::must(engine.block_on(sink->recover(dataflow::recovery_of())), "kafka sink recover");
    const auto record = [](std::uint64_t) { return value; };
    engine.block_on(connectors::drive_sink<std::string>(sink.get(), 1, 1, record, 0));  // the warm-up
    const auto start = bench_clock::now();
    engine.block_on(connectors::drive_sink<std::string>(sink.get(), records_, per_checkpoint_, record, 1));
    const double seconds = seconds_since(start);
    engine.block_on(sink->close());
    return seconds;
  }

  double plain_produce_seconds() {
    rd_kafka_t* p = client(RD_KAFKA_PRODUCER, {{"bootstrap.servers", brokers_},
                                               {"transactional.id", fmt::format("plain{}", runs_++)},
                                               {"enable.idempotence", "true"},
                                               {"log_level", "0"}});
    check(rd_kafka_init_transactions(p, 30000), "init_transactions");
    produce_in_transactions(p, 1, 1);  // the warm-up
    const auto start = bench_clock::now();
    produce_in_transactions(p, records_, per_checkpoint_);
    const double seconds = seconds_since(start);
    rd_kafka_destroy(p);
    return seconds;
  }

  void produce_in_transactions(rd_kafka_t* p, std::uint64_t n, std::uint64_t per_checkpoint) {
    for (std::uint64_t i = 0; i < n; ++i) {
      if (i % per_checkpoint == 0) check(rd_kafka_begin_transaction(p), "begin_transaction");
      for (;;) {
        const auto err = rd_kafka_producev(p, RD_KAFKA_V_TOPIC("in-plain"),
                                           RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) throw std::runtime_error(std::string("kafka bench: produce: ") + rd_kafka_err2str(err));
        rd_kafka_poll(p, 10);
      }
      if ((i + 1) % per_checkpoint == 0 || i + 1 == n) check(rd_kafka_commit_transaction(p, 30000), "commit_transaction");
    }
  }

  double source_seconds(runtime::engine& engine) {
    auto source = kafka::make_kafka_source({.brokers = brokers_, .topic = "out", .bounded = true},
                                           kafka::test::context("bench", 0, 1));
    const auto start = bench_clock::now();
    const std::uint64_t got = engine.block_on(connectors::drain_source<std::string>(source.get()));
    const double seconds = seconds_since(start);
    engine.block_on(source->close());
    if (got != source_records_) {
      throw std::runtime_error(fmt::format("kafka bench: the source read {} of {} records", got, source_records_));
    }
    return seconds;
  }

  double plain_consume_seconds() {
    const auto start = bench_clock::now();
    rd_kafka_t* c = client(RD_KAFKA_CONSUMER, {{"bootstrap.servers", brokers_}, {"group.id", "plain"}, {"log_level", "0"}});
    rd_kafka_poll_set_consumer(c);
    // The topic's metadata first, as the source asks for its partition count: without it the
    // consumer learns the partitions' leader only at a later refresh, 0.5 s after the assign.
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_topic_t* t = rd_kafka_topic_new(c, "out", nullptr);
    const rd_kafka_resp_err_t err = rd_kafka_metadata(c, 0, t, &md, 10000);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) throw std::runtime_error(std::string("kafka bench: metadata: ") + rd_kafka_err2str(err));
    auto* list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; ++p) rd_kafka_topic_partition_list_add(list, "out", p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(c, list);
    rd_kafka_topic_partition_list_destroy(list);
    std::uint64_t got = 0;
    while (got < source_records_) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 10000);
      if (m == nullptr) break;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) ++got;
      rd_kafka_message_destroy(m);
    }
    const double seconds = seconds_since(start);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    if (got != source_records_) {
      throw std::runtime_error(fmt::format("kafka bench: the plain consumer read {} of {} records", got, source_records_));
    }
    return seconds;
  }

  void report(const reporter& out, const common_options& common, std::string_view direction, std::string_view figure,
              std::string_view baseline, const paired_result& r) const {
    const std::uint64_t n = direction == "in" ? records_ : source_records_;
    connectors::report(out, name(), fmt::format("{} ({})", direction, figure), baseline, r,
                       fmt::format("{} records of 100 bytes, {} partitions, mock cluster", n, partitions), n,
                       per_checkpoint_, common.runs, {{"direction", std::string(direction)}});
  }

  std::uint64_t records_ = 300'000;
  std::uint64_t per_checkpoint_ = 10'000;
  // As many as the mock keeps: it drops a partition's oldest records beyond about 5 MiB (some 45 k
  // records of 100 bytes), so a larger --source-records fails the count. Read in some 50 ms.
  std::uint64_t source_records_ = 160'000;
  std::string brokers_;
  unsigned runs_ = 0;
};

registration<kafka_bench> reg;

}  // namespace
}  // namespace sluice::bench
