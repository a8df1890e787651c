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
// (window_start = timestamp rounded down to a multiple of window_ms). An input may be a source
// (a stream: JetStream, Kafka): its watermarks then come from the lines' timestamps
// (event_time.hpp), a line at most max_out_of_orderness_ms behind the latest one; a line further
// behind fails the job, naming it, as an unsorted file does.

#include <sluice/dataflow/connector.hpp>
#include <sluice/dataflow/job.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace sluice::dataflow {

// A word's total, and a word's count in the window starting at a line index.
using counted_word = std::pair<std::string, std::uint64_t>;
using windowed_count = std::tuple<std::uint64_t, std::string, std::uint64_t>;  // (window_start, word, count)

struct wordcount_options {
  std::string input;       // a text file; or, when `source` is given, only what the error messages call it
  std::string output_dir;  // the output files' directory, unless one of the sinks below is given
  std::size_t parallelism = 2;
  std::uint64_t window_lines = 0;  // 0: totals over the whole input
  std::chrono::microseconds slow_sink{0};  // the least time the sink spends per output line
  // Another source of lines (a connector: JetStream, Kafka). It must end (be bounded): totals are
  // written when the input ends. Windows need line numbers: with a source, window_lines must be 0.
  std::optional<source_spec<std::string>> source;
  // Other sinks: output lines (as the files have them) into a connector, or the records themselves
  // (a table: totals as (word, count), windows as (window_start, word, count)).
  std::optional<sink_spec<std::string>> line_sink;
  std::optional<sink_spec<counted_word>> totals_sink;
  std::optional<sink_spec<windowed_count>> windows_sink;
};

// Adds the word-count stages to `job`. Throws std::invalid_argument for bad options.
void build_wordcount(job_builder& job, const wordcount_options& options);

struct join_options {
  std::string left;   // a file, or what left_source reads (for the messages)
  std::string right;
  std::string output_dir;  // unless line_sink is given
  std::size_t parallelism = 2;
  std::uint64_t window_ms = 1000;
  std::chrono::microseconds slow_sink{0};  // the least time the sink spends per output line
  std::optional<sink_spec<std::string>> line_sink;  // the output lines into a connector instead
  std::optional<source_spec<std::string>> left_source;  // a stream instead of the file `left`
  std::optional<source_spec<std::string>> right_source;
  std::uint64_t max_out_of_orderness_ms = 0;  // for the sources' lines (a file must be sorted)
  // Not 0: a regular join with an event-time state TTL of this much instead of the window join:
  // rows whose times are less than it apart join ("left_time key left_payload right_payload").
  std::uint64_t state_ttl_ms = 0;
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
