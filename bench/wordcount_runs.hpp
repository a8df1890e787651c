#pragma once
// The word-count job and its one-thread baseline as the wordcount and state benchmarks run them.

#include <sluice/dataflow/job_runner.hpp>

#include <chrono>
#include <cstddef>
#include <string>

namespace sluice::bench {

// Seconds a one-thread std::unordered_map count of the words of `path` takes (a std::ifstream read).
double one_thread_count_seconds(const std::string& path);

struct wordcount_run {
  double seconds = 0;
  dataflow::job_result result;
};
// Runs `sluice wordcount` over `input` into dir/out with unaligned checkpoints every `interval`
// (none when zero) in dir/chk: afresh (both emptied first), or resumed from dir/chk. Throws
// std::runtime_error naming `bench` if the job fails.
wordcount_run run_wordcount_job(const std::string& bench, const std::string& dir, const std::string& input,
                                std::size_t parallelism, std::chrono::milliseconds interval, bool afresh);

}  // namespace sluice::bench
