// kafka_mock_cluster: librdkafka's mock cluster in a process of its own, for process-level tests
// (a job that is SIGKILLed must not take the cluster with it).
//   kafka_mock_cluster BROKERS TOPIC:PARTITIONS [TOPIC:PARTITIONS...]
// Creates the cluster and the topics, prints the bootstrap address on one line to stdout, then
// stays until killed (or its parent dies: PR_SET_PDEATHSIG).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <cstdint>

int main(int argc, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s BROKERS TOPIC:PARTITIONS...\n", argv[0]);
    return 2;
  }
  char errstr[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof errstr);
  rd_kafka_t* owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (owner == nullptr) {
    std::fprintf(stderr, "kafka_mock_cluster: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(owner, std::atoi(argv[1]));
  if (cluster == nullptr) {
    std::fprintf(stderr, "kafka_mock_cluster: rd_kafka_mock_cluster_new failed\n");
    return 1;
  }
  for (int i = 2; i < argc; ++i) {
    std::string spec = argv[i];
    auto colon = spec.rfind(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "kafka_mock_cluster: '%s' is not TOPIC:PARTITIONS\n", argv[i]);
      return 2;
    }
    auto err = rd_kafka_mock_topic_create(cluster, spec.substr(0, colon).c_str(),
                                          std::atoi(spec.c_str() + colon + 1), 1);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::fprintf(stderr, "kafka_mock_cluster: creating topic '%s': %s\n", argv[i], rd_kafka_err2str(err));
      return 1;
    }
  }
  std::printf("%s\n", rd_kafka_mock_cluster_bootstraps(cluster));
  std::fflush(stdout);
  // Commands on stdin, a line each, each answered "ok" or "error: ..." on stdout:
  //   errors API_KEY COUNT ERR   the next COUNT requests of API_KEY (1: Fetch, 0: Produce) fail with ERR
  //   down BROKER | up BROKER    the broker stops answering / answers again
  //   leader TOPIC PARTITION BROKER
  char line[512];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    char word[64] = {0}, topic[256] = {0};
    int a = 0, b = 0, c = 0;
    bool ok = true;
    if (std::sscanf(line, "errors %d %d %d", &a, &b, &c) == 3 && b >= 0 && b <= 10000) {
      std::vector<rd_kafka_resp_err_t> errs(static_cast<std::size_t>(b), static_cast<rd_kafka_resp_err_t>(c));
      rd_kafka_mock_push_request_errors_array(cluster, static_cast<std::int16_t>(a), errs.size(), errs.data());
    } else if (std::sscanf(line, "%63s %d", word, &a) == 2 && std::string(word) == "down") {
      ok = rd_kafka_mock_broker_set_down(cluster, a) == RD_KAFKA_RESP_ERR_NO_ERROR;
    } else if (std::sscanf(line, "%63s %d", word, &a) == 2 && std::string(word) == "up") {
      ok = rd_kafka_mock_broker_set_up(cluster, a) == RD_KAFKA_RESP_ERR_NO_ERROR;
    } else if (std::sscanf(line, "leader %255s %d %d", topic, &a, &b) == 3) {
      ok = rd_kafka_mock_partition_set_leader(cluster, topic, a, b) == RD_KAFKA_RESP_ERR_NO_ERROR;
    } else {
      ok = false;
    }
    std::printf(ok ? "ok\n" : "error: %s", ok ? "" : line);
    std::fflush(stdout);
  }
  for (;;) ::pause();  // stdin closed (or never given): stay until killed
}
