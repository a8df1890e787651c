// See cluster_cli.hpp.

#include "cluster_cli.hpp"
#include "cli_options.hpp"

#include <sluice/buffers/secret_file.hpp>
#include <sluice/io/address.hpp>

#include <fmt/core.h>


namespace sluice::apps {

void add_cluster_options(CLI::App& command, cluster_cli& o) {
  CLI::Option* cluster = command.add_option(
      "--cluster", o.endpoint,
      "Run as one worker of a job across processes, coordinated through this etcd: http://HOST:PORT or "
      "unix:///PATH");
  // The others mean nothing without it: a usage error ("--workers requires --cluster"), never ignored.
  command.add_option("--job-name", o.job_name, "With --cluster: the job's name in etcd (the same for every worker)")
      ->needs(cluster);
  add_number_option(command, "--workers", o.workers, "With --cluster: how many workers run the job", 1, 256)
      ->needs(cluster);
  add_number_option(command, "--worker-index", o.index, "With --cluster: this worker's index, below --workers", 0, 255)
      ->needs(cluster);
  command.add_option("--listen", o.listen, "With --cluster: this worker's data port, HOST:PORT (bound to that address only)")
      ->needs(cluster);
  command.add_option("--advertise", o.advertise, "With --cluster: how the other workers reach the data port (default: --listen)")
      ->needs(cluster);
  command
      .add_option("--secret-file", o.secret_file,
                  "With --cluster: a file holding the workers' shared secret (mode 0600): peers of the data port "
                  "must prove they know it")
      ->needs(cluster);
}

std::variant<cluster::worker_options, std::string> worker_options_of(const cluster_cli& o) {
  cluster::worker_options w;
  if (o.job_name.empty()) return std::string("--cluster needs --job-name");
  if (o.job_name.find_first_of("/ \t\n") != std::string::npos) return std::string("--job-name must not hold '/' or spaces");
  if (o.index >= o.workers) return fmt::format("--worker-index {} must be below --workers {}", o.index, o.workers);
  if (o.listen.empty()) return std::string("--cluster needs --listen HOST:PORT");
  io::result<io::address> listen = io::address::parse(o.listen);
  if (!listen || listen->port() == 0) return fmt::format("--listen '{}' is not HOST:PORT with a port", o.listen);
  w.endpoint = o.endpoint;
  w.job_name = o.job_name;
  w.workers = o.workers;
  w.index = o.index;
  w.listen = *listen;
  w.advertise = *listen;
  if (!o.advertise.empty()) {
    io::result<io::address> advertise = io::address::parse(o.advertise);
    if (!advertise || advertise->port() == 0) return fmt::format("--advertise '{}' is not HOST:PORT", o.advertise);
    w.advertise = *advertise;
  }
  if (!o.secret_file.empty()) {
    io::result<std::vector<std::byte>> secret = buffers::read_secret_file(o.secret_file);
    if (!secret) return "--secret-file: " + secret.error().message();
    w.secret = std::move(secret).value();
  }
  return w;
}

}  // namespace sluice::apps
