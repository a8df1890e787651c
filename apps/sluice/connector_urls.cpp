#include "connector_urls.hpp"

#include <sluice/kafka/kafka.hpp>
#include <sluice/nats/connectors.hpp>
#include <sluice/postgres/sink.hpp>

#include <stdexcept>

namespace sluice::apps {

namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// file:///PATH -> /PATH (a plain path is itself).
std::string file_path(const std::string& what, const std::string& url) {
  if (!starts_with(url, "file://")) return url;
  std::string path = url.substr(7);
  if (path.empty() || path.front() != '/') {
    throw std::invalid_argument(what + " " + url + ": a file URL is file:///ABSOLUTE/PATH");
  }
  return path;
}

nats::nats_url nats_url_of(const std::string& what, const std::string& url) {
  auto parsed = nats::parse_url(url);
  if (!parsed) throw std::invalid_argument(what + " " + url + ": " + parsed.error().message());
  return parsed.value();
}

kafka::kafka_options kafka_url_of(const std::string& what, const std::string& url) {
  try {
    return kafka::parse_kafka_url(url);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(what + ": " + e.what());
  }
}

std::string unsupported(const std::string& what, const std::string& url, const char* takes) {
  const std::size_t colon = url.find("://");
  return what + " " + url + ": '" + url.substr(0, colon) + "://' is not an input or output the sample jobs know (" +
         takes + ")";
}

}  // namespace

bool is_connector_url(const std::string& output) {
  return output.find("://") != std::string::npos && !starts_with(output, "file://");
}

lines_input parse_lines_input(const std::string& input, bool bounded) {
  lines_input in;
  if (starts_with(input, "nats://")) {
    in.spec = nats::jetstream_source_spec(nats_url_of("--input", input), bounded);
    in.ends = bounded;
  } else if (starts_with(input, "kafka://")) {
    kafka::kafka_options k = kafka_url_of("--input", input);
    std::string url = input;
    if (bounded && !k.bounded) url += (url.find('?') == std::string::npos ? "?bounded" : "&bounded");
    in.spec = kafka::kafka_source_spec(url);
    in.ends = bounded || k.bounded;
  } else if (is_connector_url(input)) {
    throw std::invalid_argument(
        unsupported("--input", input, "a file, file:///PATH, nats://HOST:PORT/STREAM, kafka://BROKERS/TOPIC"));
  } else {
    in.file = file_path("--input", input);
    if (bounded) throw std::invalid_argument("--bounded is for stream inputs (nats://, kafka://); a file always ends");
  }
  return in;
}

namespace {

// The line outputs of every sample job: a directory, JetStream or Kafka. False: not one of these.
bool set_line_output(std::string& output_dir, std::optional<dataflow::sink_spec<std::string>>& line_sink,
                     const std::string& output) {
  if (starts_with(output, "nats://")) {
    line_sink = nats::jetstream_sink_spec(nats_url_of("--output", output));
  } else if (starts_with(output, "kafka://")) {
    const kafka::kafka_options k = kafka_url_of("--output", output);
    if (k.bounded) throw std::invalid_argument("--output " + output + ": ?bounded is for an input");
    line_sink = kafka::kafka_sink_spec(output);
  } else if (is_connector_url(output)) {
    return false;
  } else {
    output_dir = file_path("--output", output);
  }
  return true;
}

}  // namespace

void set_wordcount_io(dataflow::wordcount_options& o, const std::string& input, const std::string& output,
                      bool bounded) {
  lines_input in = parse_lines_input(input, bounded);
  o.input = in.spec ? input : in.file;
  o.source = std::move(in.spec);
  if (!in.ends && o.window_lines == 0) {
    throw std::invalid_argument("--input " + input +
                                " never ends, and word count totals are written when the input ends: give --bounded "
                                "(stop where the stream ends as the job first starts)");
  }
  if (set_line_output(o.output_dir, o.line_sink, output)) return;
  if (!starts_with(output, "postgresql://") && !starts_with(output, "postgres://")) {
    throw std::invalid_argument(unsupported(
        "--output", output, "a directory, nats://HOST:PORT/SUBJECT, kafka://BROKERS/TOPIC, postgresql://...?table=T"));
  }
  try {
    if (o.window_lines == 0) {
      o.totals_sink = postgres::sink_spec<dataflow::counted_word>(
          output, {"word", "count"}, {"word"},
          [](const dataflow::counted_word& c) { return postgres::row{c.first, std::to_string(c.second)}; },
          "CREATE TABLE IF NOT EXISTS " + postgres::parse_url(output).table +
              " (word text PRIMARY KEY, count bigint NOT NULL)");
    } else {
      o.windows_sink = postgres::sink_spec<dataflow::windowed_count>(
          output, {"window_start", "word", "count"}, {"window_start", "word"}, [](const dataflow::windowed_count& c) {
            return postgres::row{std::to_string(std::get<0>(c)), std::get<1>(c), std::to_string(std::get<2>(c))};
          },
          "CREATE TABLE IF NOT EXISTS " + postgres::parse_url(output).table +
              " (window_start bigint, word text, count bigint NOT NULL, PRIMARY KEY (window_start, word))");
    }
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--output: ") + e.what());
  }
}

void set_join_io(dataflow::join_options& o, const std::string& left, const std::string& right, bool bounded) {
  const auto side = [bounded](const std::string& url, std::string& file,
                              std::optional<dataflow::source_spec<std::string>>& src) {
    lines_input in = parse_lines_input(url, bounded);
    file = in.spec ? url : in.file;
    src = std::move(in.spec);
  };
  side(left, o.left, o.left_source);
  side(right, o.right, o.right_source);
  if (o.max_out_of_orderness_ms != 0 && !o.left_source && !o.right_source) {
    throw std::invalid_argument("--max-out-of-orderness-ms is for stream inputs (nats://, kafka://): a file must be "
                                "sorted by timestamp");
  }
}

void set_join_output(dataflow::join_options& o, const std::string& output) {
  if (!set_line_output(o.output_dir, o.line_sink, output)) {
    throw std::invalid_argument(
        unsupported("--output", output, "a directory, nats://HOST:PORT/SUBJECT, kafka://BROKERS/TOPIC"));
  }
}

}  // namespace sluice::apps
