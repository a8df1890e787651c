#pragma once
// What the sample jobs' --input and --output name (issue 16): a file or directory, or a connector's
// URL, turned into the job's options.
//
//   --input   PATH | file:///PATH | nats://HOST:PORT/STREAM | kafka://BROKERS/TOPIC
//   --output  DIR | file:///DIR | nats://HOST:PORT/SUBJECT | kafka://BROKERS/TOPIC
//             | postgresql://...?table=T (libpq's URI plus table=; word count only: a table
//               (word text primary key, count bigint), or with windows (window_start bigint,
//               word text, count bigint, primary key (window_start, word)))
//   --bounded stream sources stop at the stream's end as of the job's first start (kept in the
//             checkpoint: a resumed job stops at the same place)
//
// Every error is std::invalid_argument with a message naming the option and the URL: the tool
// reports it and exits 2 before anything ran.

#include <sluice/dataflow/connector.hpp>
#include <sluice/dataflow/samples.hpp>

#include <optional>
#include <string>

namespace sluice::apps {

// A source of lines: a file (file set) or a connector (spec set); `ends` when it is bounded.
struct lines_input {
  std::string file;
  std::optional<dataflow::source_spec<std::string>> spec;
  bool ends = true;
};
lines_input parse_lines_input(const std::string& input, bool bounded);

// Whether --output names a connector rather than a directory.
bool is_connector_url(const std::string& output);

// Points a word count at its input and output.
void set_wordcount_io(dataflow::wordcount_options& o, const std::string& input, const std::string& output,
                      bool bounded);
// The join's inputs: files or streams (each with --bounded, or not; o.max_out_of_orderness_ms is
// set first, and refused when neither input is a stream); and its output.
void set_join_io(dataflow::join_options& o, const std::string& left, const std::string& right, bool bounded);
void set_join_output(dataflow::join_options& o, const std::string& output);

}  // namespace sluice::apps
