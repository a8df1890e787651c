#pragma once
// `sluice wordcount`, `sluice join` and their input generators: parse the options, run the job, print a summary.

#include "cluster_cli.hpp"

#include <CLI/CLI.hpp>

#include <sluice/dataflow/job_runner.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace sluice::apps {

struct job_cli_options {
  std::string checkpoint_dir;
  std::uint64_t checkpoint_interval_ms = 1000;
  std::string checkpoint_mode = "aligned";
  std::uint64_t alignment_timeout_ms = 100;
  std::size_t parallelism = 2;
  std::string transport = "local";
  unsigned executors = 0;  // 0: runtime::available_cpus()
  std::uint64_t max_record_bytes = std::uint64_t{16} << 20;
  std::uint64_t network_memory_mib = 1024;  // --network-memory: the job's cap of channel-buffer memory
  bool quiet = false;
  std::string on_sigterm = "drain";  // drain or now
  std::string metrics;  // --metrics HOST:PORT: Prometheus metrics at http://HOST:PORT/metrics
  cluster_cli cluster;  // one worker of a job across processes, when given
};

struct wordcount_cli {
  std::string input;
  std::string output;
  std::uint64_t window_lines = 0;
  std::uint64_t slow_sink_us = 0;
  bool bounded = false;
  job_cli_options job;
};

struct join_cli {
  std::string left;
  std::string right;
  std::string output;
  std::uint64_t window_ms = 0;     // 0: not given
  std::uint64_t state_ttl_ms = 0;  // 0: not given (the window join)
  std::uint64_t slow_sink_us = 0;
  bool bounded = false;
  std::uint64_t max_out_of_orderness_ms = 0;
  job_cli_options job;
};

struct join_input_cli {
  std::string output;
  std::uint64_t rows = 100'000;
  std::uint64_t keys = 1000;
  std::uint64_t span_ms = 60'000;
  std::uint64_t seed = 42;
  std::string prefix = "p";
};

struct corpus_cli {
  std::string output;
  std::uint64_t lines = 1'000'000;
  std::uint64_t seed = 42;
  std::uint64_t distinct = 0;
};

// The options every sample job takes (checkpoints, parallelism, transport, executors, ...).
void add_job_options(CLI::App& command, job_cli_options& options);
// What a sample job adds to its summary once it ran (a line starting with '\n', or nothing).
using job_summary_fn = std::function<std::string(const dataflow::job_result&)>;
// Builds a job named `what` with build(job) and runs it with the options, drawing the progress line
// and printing the summary. Returns the exit code (0 done, 1 failed, 2 bad usage or refused, 130
// stopped by a signal); an exception from build() is bad usage, said on stderr.
int run_sample(const char* what, const job_cli_options& options,
               const std::function<void(dataflow::job_builder&)>& build, const job_summary_fn& extra = {});

void add_wordcount_options(CLI::App& command, wordcount_cli& options);
void add_corpus_options(CLI::App& command, corpus_cli& options);
int run_corpus(const corpus_cli& options);
// Returns the process exit code (0 done, 1 failed, 2 bad usage, 130 stopped by a signal).
int run_wordcount(const wordcount_cli& options);
void add_join_options(CLI::App& command, join_cli& options);
int run_join(const join_cli& options);
void add_join_input_options(CLI::App& command, join_input_cli& options);
int run_join_input(const join_input_cli& options);

}  // namespace sluice::apps
