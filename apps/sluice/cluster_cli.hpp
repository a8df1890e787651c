#pragma once
// The options that make `sluice wordcount` and `sluice join` one worker of a job across processes
// (cluster/worker.hpp): --cluster ENDPOINT --job-name NAME --workers N --worker-index I
// --listen HOST:PORT [--advertise HOST:PORT] [--secret-file FILE].

#include <sluice/cluster/worker.hpp>

#include <CLI/CLI.hpp>

#include <string>
#include <variant>

namespace sluice::apps {

struct cluster_cli {
  std::string endpoint;
  std::string job_name;
  unsigned workers = 1;
  unsigned index = 0;
  std::string listen;
  std::string advertise;
  std::string secret_file;
  bool given() const noexcept { return !endpoint.empty(); }
};

void add_cluster_options(CLI::App& command, cluster_cli& options);
// The worker's options, or why they are unusable (a usage error: exit code 2). The secret file must
// be a regular file that only its owner may read or write (mode 0600 or stricter).
std::variant<cluster::worker_options, std::string> worker_options_of(const cluster_cli& options);

}  // namespace sluice::apps
