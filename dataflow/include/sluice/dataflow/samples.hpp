#pragma once
// The sample jobs of the `sluice` tool, as job graphs anyone can run with run_job (and tests do).
//
// wordcount: words are split on ASCII whitespace, case preserved. Output lines "word count" with
// each word's total; with window_lines N > 0, lines "window_start word count" per tumbling window
// of N input lines (window_start = the 0-based index of the window's first line).
//
// join: two CSV inputs of lines "key,timestamp_ms,payload" (payload: the rest of the line, commas
// and all), each sorted by timestamp. Output lines "window_start key left_payload right_payload" for
// every left and right line with equal keys in the same tumbling window of window_ms
// (window_start = timestamp rounded down to a multiple of window_ms).

#include <sluice/dataflow/job.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::dataflow {

struct wordcount_options {
  std::string input;
  std::string output_dir;
  std::size_t parallelism = 2;
  std::uint64_t window_lines = 0;  // 0: totals over the whole input
  std::chrono::microseconds slow_sink{0};  // the least time the sink spends per output line
};

// Adds the word-count stages to `job`. Throws std::invalid_argument for bad options.
void build_wordcount(job_builder& job, const wordcount_options& options);

struct join_options {
  std::string left;
  std::string right;
  std::string output_dir;
  std::size_t parallelism = 2;
  std::uint64_t window_ms = 1000;
  std::chrono::microseconds slow_sink{0};  // the least time the sink spends per output line
};

// One CSV line of a join input.
struct join_row {
  std::string key;
  std::uint64_t timestamp_ms = 0;
  std::string payload;
};
// Throws std::invalid_argument naming what is wrong with the line.
join_row parse_join_row(std::string_view line);

// Adds the join stages to `job`: two sources, a key exchange each, the window join, the file sink.
void build_join(job_builder& job, const join_options& options);

// Splits `line` on ASCII whitespace (space, \t, \n, \v, \f, \r).
template <class F>
void for_each_word(std::string_view line, F&& f) {
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || (line[i] >= '\t' && line[i] <= '\r'))) ++i;
    std::size_t j = i;
    while (j < line.size() && !(line[j] == ' ' || (line[j] >= '\t' && line[j] <= '\r'))) ++j;
    if (j > i) f(line.substr(i, j - i));
    i = j;
  }
}

}  // namespace sluice::dataflow
