#pragma once
// A librdkafka mock cluster in the test process (rdkafka_mock.h), and plain blocking helpers that
// fill and read back its topics from the test's own thread (never from an executor).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <sluice/dataflow/connector.hpp>
#include <sluice/runtime/engine.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::kafka::test {

// The engine a test drives a connector on: one executor, signals left alone.
inline runtime::engine_options one_executor() {
  runtime::engine_options o;
  o.executors = 1;
  o.handle_signals = false;
  return o;
}

class mock_cluster {
 public:
  explicit mock_cluster(int brokers = 1) {
    char errstr[256];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof errstr);
    owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (owner_ == nullptr) throw std::runtime_error(std::string("mock owner: ") + errstr);
    cluster_ = rd_kafka_mock_cluster_new(owner_, brokers);
    if (cluster_ == nullptr) throw std::runtime_error("rd_kafka_mock_cluster_new failed");
  }
  ~mock_cluster() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(owner_);
  }
  std::string bootstrap() const { return rd_kafka_mock_cluster_bootstraps(cluster_); }
  void create_topic(const std::string& topic, int partitions) {
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) throw std::runtime_error(rd_kafka_err2str(err));
  }
  rd_kafka_mock_cluster_t* get() const { return cluster_; }

 private:
  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
};

// Produces values[i] to partition partition_of(i), blocking until all are delivered.
template <class F>
inline void produce(const std::string& brokers, const std::string& topic, const std::vector<std::string>& values,
                    F partition_of) {
  char errstr[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), errstr, sizeof errstr);
  static thread_local std::string first_failure;
  first_failure.clear();
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void*) {
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR && first_failure.empty()) first_failure = rd_kafka_err2str(m->err);
  });
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (;;) {
      auto err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic.c_str()),
                                   RD_KAFKA_V_PARTITION(static_cast<std::int32_t>(partition_of(i))),
                                   RD_KAFKA_V_VALUE(const_cast<char*>(values[i].data()), values[i].size()),
                                   RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) throw std::runtime_error(rd_kafka_err2str(err));
      rd_kafka_poll(rk, 10);
    }
  }
  rd_kafka_flush(rk, 30000);
  rd_kafka_destroy(rk);
  if (!first_failure.empty()) throw std::runtime_error("test producer: a delivery failed: " + first_failure);
}

// Every committed value of the topic (all partitions, read_committed), read until `expect` values
// came or the topic stayed quiet for `quiet_ms` after its end.
inline std::vector<std::string> read_committed(const std::string& brokers, const std::string& topic,
                                               int partitions, std::size_t expect, int quiet_ms = 1500) {
  char errstr[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "group.id", "read-back", errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "isolation.level", "read_committed", errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "enable.partition.eof", "true", errstr, sizeof errstr);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
  rd_kafka_poll_set_consumer(rk);
  auto* list = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p)
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  std::vector<std::string> out;
  int eofs = 0;
  while (true) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, eofs >= partitions ? quiet_ms / 10 : quiet_ms);
    if (m == nullptr) {
      if (eofs >= partitions || out.size() >= expect) break;
      continue;
    }
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) ++eofs;
    else if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) out.emplace_back(static_cast<const char*>(m->payload), m->len);
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return out;
}

// Whether the cluster keeps an offset committed through a transaction (TxnOffsetCommit + EndTxn):
// librdkafka 2.0.2's mock cluster does not (its TxnOffsetCommit and EndTxn handlers only answer,
// so it also shows aborted records to read_committed readers). "" when it does, else why not.
inline std::string transactions_unsupported(const std::string& brokers, const std::string& topic) {
  char errstr[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "transactional.id", "probe", errstr, sizeof errstr);
  rd_kafka_t* p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  std::string why;
  if (rd_kafka_error_t* e = rd_kafka_init_transactions(p, 10000)) {
    why = std::string("init_transactions: ") + rd_kafka_error_string(e);
    rd_kafka_error_destroy(e);
  } else {
    rd_kafka_begin_transaction(p);
    auto* offsets = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(offsets, topic.c_str(), 0)->offset = 7;
    auto* group = rd_kafka_consumer_group_metadata_new("probe-group");
    if (rd_kafka_error_t* e = rd_kafka_send_offsets_to_transaction(p, offsets, group, 10000)) rd_kafka_error_destroy(e);
    if (rd_kafka_error_t* e = rd_kafka_commit_transaction(p, 10000)) rd_kafka_error_destroy(e);
    rd_kafka_consumer_group_metadata_destroy(group);
    rd_kafka_topic_partition_list_destroy(offsets);
  }
  rd_kafka_destroy(p);
  if (!why.empty()) return why;
  conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "group.id", "probe-group", errstr, sizeof errstr);
  rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
  auto* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), 0);
  rd_kafka_committed(c, list, 10000);
  if (list->elems[0].offset != 7)
    why = "the Kafka cluster (librdkafka's mock) does not keep offsets committed in a transaction "
          "(TxnOffsetCommit/EndTxn only answer), so the transactional sink's exactly-once cannot be checked on it";
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  return why;
}

template <class T>
struct vector_collector : dataflow::collector<T> {
  std::vector<T> records;
  void collect(const T& r) override { records.push_back(r); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};

inline dataflow::connector_context context(std::string job, std::size_t subtask, std::size_t parallelism) {
  dataflow::connector_context c;
  c.job = std::move(job);
  c.stage = "kafka";
  c.task = static_cast<snapshot::task_id>(subtask);
  c.subtask = subtask;
  c.parallelism = parallelism;
  return c;
}

#ifdef SLUICE_KAFKA_MOCK_CLUSTER_PATH
// The mock cluster helper process (tests/kafka/mock_cluster_main.cpp): started with its topics, its
// bootstrap address read from its first line, commanded through its stdin (command()), SIGKILLed at
// the end.
class mock_cluster_process {
 public:
  explicit mock_cluster_process(std::vector<std::string> args) {
    int out[2], in[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    std::vector<char*> argv{const_cast<char*>(SLUICE_KAFKA_MOCK_CLUSTER_PATH)};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(in[0], 0);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(in[0]);
    from_ = out[0];
    to_ = in[1];
    bootstrap_ = read_line();
  }
  ~mock_cluster_process() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(from_);
    ::close(to_);
  }
  const std::string& bootstrap() const { return bootstrap_; }
  // Sends one command line ("errors 1 20 6", "down 2", "up 2", "leader T P B"); its answer.
  std::string command(const std::string& line) {
    const std::string l = line + "\n";
    if (::write(to_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) return "error: write failed";
    return read_line();
  }

 private:
  std::string read_line() {
    std::string s;
    char c;
    while (::read(from_, &c, 1) == 1 && c != '\n') s += c;
    return s;
  }
  pid_t pid_ = -1;
  int from_ = -1;
  int to_ = -1;
  std::string bootstrap_;
};
#endif

}  // namespace sluice::kafka::test
