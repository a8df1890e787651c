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
  for (;;) ::pause();
}
