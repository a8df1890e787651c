#include <sluice/dataflow/event_time.hpp>
#include <sluice/dataflow/join.hpp>
#include <sluice/dataflow/keyed_process.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <charconv>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace sluice::dataflow {

namespace {
using windowed_word = std::pair<std::uint64_t, std::string>;  // (line index, word)
}  // namespace

namespace {

std::string line_of(const counted_word& c) { return c.first + " " + std::to_string(c.second); }
std::string line_of(const windowed_count& c) {
  return std::to_string(std::get<0>(c)) + " " + std::get<1>(c) + " " + std::to_string(std::get<2>(c));
}

// The output: the typed sink when given, else lines into the line sink or the output directory.
template <class T>
void write_output(const stream<T>& out, const std::optional<sink_spec<T>>& typed,
                  const std::optional<sink_spec<std::string>>& lines, const std::string& dir, sink_options options) {
  if (typed) {
    out.template write_to<T>(*typed, nullptr, options);
  } else {
    out.template write_to<std::string>(lines ? *lines : file_lines_sink_spec(dir),
                                       [](const T& c) { return line_of(c); }, options);
  }
}

}  // namespace

void build_wordcount(job_builder& job, const wordcount_options& o) {
  const int sinks = int(o.line_sink.has_value()) + int(o.totals_sink.has_value()) + int(o.windows_sink.has_value());
  if ((o.input.empty() && !o.source) || (o.output_dir.empty() && sinks == 0)) {
    throw std::invalid_argument("wordcount: --input and --output are required");
  }
  if (sinks > 1) throw std::invalid_argument("wordcount: one output at most");
  if (o.parallelism == 0) throw std::invalid_argument("wordcount: --parallelism must be at least 1");
  if (o.window_lines == 0 && o.windows_sink) {
    throw std::invalid_argument("wordcount: this output takes windows (--window-lines N), not totals");
  }
  if (o.window_lines != 0 && o.totals_sink) {
    throw std::invalid_argument("wordcount: this output takes totals, not windows (--window-lines 0)");
  }
  const sink_options sink{o.slow_sink};
  if (o.window_lines == 0) {
    auto lines = o.source ? job.read_from<std::string>("read", o.parallelism, *o.source)
                          : job.read_lines("read", o.input, o.parallelism);
    auto counts =
        lines
            .flat_map<std::string>([](const std::string& line, emitter<std::string>& out) {
              for_each_word(line, [&](std::string_view w) { out.emit(std::string(w)); });
            })
            .key_by<std::string>([](const std::string& w) { return w; })
            // Each reader counts its words locally; (word, partial count) pairs cross the exchange.
            .combine<std::uint64_t>([](std::uint64_t& n, const std::string&) { ++n; })
            .aggregate<std::uint64_t, counted_word>(
                "count", o.parallelism, [](std::uint64_t& n, const counted_word& partial) { n += partial.second; },
                [](const std::string& w, const std::uint64_t& n) { return counted_word(w, n); });
    write_output(counts, o.totals_sink, o.line_sink, o.output_dir, sink);
    return;
  }
  if (o.source) {
    throw std::invalid_argument("wordcount: windows of --window-lines count a file's line numbers; read " + o.input +
                                " with --window-lines 0 (totals)");
  }
  const std::uint64_t size = o.window_lines;
  auto counts =
      job.read_indexed_lines("read", o.input)
          .flat_map<windowed_word>([](const std::pair<std::uint64_t, std::string>& line, emitter<windowed_word>& out) {
            for_each_word(line.second, [&](std::string_view w) { out.emit(windowed_word(line.first, std::string(w))); });
          })
          .key_by<std::string>([](const windowed_word& w) { return w.second; })
          .window<std::uint64_t, windowed_count>(
              "count", o.parallelism, size, [](const windowed_word& w) { return w.first; },
              [](std::uint64_t& n, const windowed_word&) { ++n; },
              [](std::uint64_t start, const std::string& w, const std::uint64_t& n) {
                return windowed_count(start, w, n);
              });
  write_output(counts, o.windows_sink, o.line_sink, o.output_dir, sink);
}

join_row parse_join_row(std::string_view line) {
  const std::size_t first = line.find(',');
  const std::size_t second = first == std::string_view::npos ? first : line.find(',', first + 1);
  if (second == std::string_view::npos) {
    throw std::invalid_argument("not a 'key,timestamp_ms,payload' line: '" + std::string(line.substr(0, 80)) + "'");
  }
  join_row row;
  row.key = std::string(line.substr(0, first));
  const std::string_view ts = line.substr(first + 1, second - first - 1);
  auto [end, ec] = std::from_chars(ts.data(), ts.data() + ts.size(), row.timestamp_ms);
  if (ts.empty() || ec != std::errc() || end != ts.data() + ts.size()) {
    throw std::invalid_argument("timestamp '" + std::string(ts.substr(0, 40)) + "' is not a whole number of milliseconds");
  }
  row.payload = std::string(line.substr(second + 1));
  return row;
}

void build_join(job_builder& job, const join_options& o) {
  if (o.left.empty() || o.right.empty() || (o.output_dir.empty() && !o.line_sink)) {
    throw std::invalid_argument("join: --left, --right and --output are required");
  }
  if (o.parallelism == 0) throw std::invalid_argument("join: --parallelism must be at least 1");
  if (o.window_ms == 0) throw std::invalid_argument("join: --window-ms must be at least 1");
  // Rows cross the key exchange as (key, timestamp, payload) tuples.
  using row = std::tuple<std::string, std::uint64_t, std::string>;
  const auto timestamp = [](std::string_view line) { return parse_join_row(line).timestamp_ms; };
  const auto side = [&](const char* name, const std::string& path, const std::optional<source_spec<std::string>>& src) {
    const event_time_options timing{o.max_out_of_orderness_ms, late_policy::fail};
    return (src ? job.read_from<std::string>(
                      name, o.parallelism,
                      with_event_time<std::string>(*src, [timestamp](const std::string& l) { return timestamp(l); },
                                                   timing))
                : job.read_timed_lines(name, path, o.parallelism, timestamp))
        .map<row>([](const std::string& line) {
          join_row r = parse_join_row(line);
          return row(std::move(r.key), r.timestamp_ms, std::move(r.payload));
        })
        .key_by<std::string>([](const row& r) { return std::get<0>(r); });
  };
  const auto time = [](const row& r) { return std::get<1>(r); };
  const auto sink = o.line_sink ? *o.line_sink : file_lines_sink_spec(o.output_dir);
  const auto line = [](const std::string& l) { return l; };
  if (o.state_ttl_ms != 0) {
    const auto ttl = state_ttl::event_time(o.state_ttl_ms);
    side("left", o.left, o.left_source)
        .state_ttl(ttl, time)
        .join<row, std::string>(side("right", o.right, o.right_source).state_ttl(ttl, time), "join", o.parallelism,
                                [](const std::string& key, const row& l, const row& r) {
                                  std::string out = std::to_string(std::get<1>(l));
                                  out.append(" ").append(key).append(" ").append(std::get<2>(l)).append(" ");
                                  return out.append(std::get<2>(r));
                                })
        .write_to<std::string>(sink, line, sink_options{o.slow_sink});
    return;
  }
  side("left", o.left, o.left_source)
      .window_join<row, std::string>(
          side("right", o.right, o.right_source), "join", o.parallelism, o.window_ms, time, time,
          [](std::uint64_t start, const std::string& key, const row& l, const row& r) {
            std::string out = std::to_string(start);
            out.append(" ").append(key).append(" ").append(std::get<2>(l)).append(" ").append(std::get<2>(r));
            return out;
          })
      .write_to<std::string>(sink, line, sink_options{o.slow_sink});
}

}  // namespace sluice::dataflow
