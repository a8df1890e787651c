#include <sluice/dataflow/join.hpp>
#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <charconv>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace sluice::dataflow {

namespace {
using counted_word = std::pair<std::string, std::uint64_t>;
using windowed_word = std::pair<std::uint64_t, std::string>;  // (line index, word)
}  // namespace

void build_wordcount(job_builder& job, const wordcount_options& o) {
  if (o.input.empty() || o.output_dir.empty()) throw std::invalid_argument("wordcount: --input and --output are required");
  if (o.parallelism == 0) throw std::invalid_argument("wordcount: --parallelism must be at least 1");
  if (o.window_lines == 0) {
    job.read_lines("read", o.input, o.parallelism)
        .flat_map<std::string>([](const std::string& line, emitter<std::string>& out) {
          for_each_word(line, [&](std::string_view w) { out.emit(std::string(w)); });
        })
        .key_by<std::string>([](const std::string& w) { return w; })
        // Each reader counts its words locally; (word, partial count) pairs cross the exchange.
        .combine<std::uint64_t>([](std::uint64_t& n, const std::string&) { ++n; })
        .aggregate<std::uint64_t, counted_word>(
            "count", o.parallelism, [](std::uint64_t& n, const counted_word& partial) { n += partial.second; },
            [](const std::string& w, const std::uint64_t& n) { return counted_word(w, n); })
        .write_lines(o.output_dir, [](const counted_word& c) { return c.first + " " + std::to_string(c.second); },
                     sink_options{o.slow_sink});
    return;
  }
  const std::uint64_t size = o.window_lines;
  using window_count = std::tuple<std::uint64_t, std::string, std::uint64_t>;
  job.read_indexed_lines("read", o.input)
      .flat_map<windowed_word>([](const std::pair<std::uint64_t, std::string>& line, emitter<windowed_word>& out) {
        for_each_word(line.second, [&](std::string_view w) { out.emit(windowed_word(line.first, std::string(w))); });
      })
      .key_by<std::string>([](const windowed_word& w) { return w.second; })
      .window<std::uint64_t, window_count>(
          "count", o.parallelism, size, [](const windowed_word& w) { return w.first; },
          [](std::uint64_t& n, const windowed_word&) { ++n; },
          [](std::uint64_t start, const std::string& w, const std::uint64_t& n) { return window_count(start, w, n); })
      .write_lines(o.output_dir, [](const window_count& c) {
        return std::to_string(std::get<0>(c)) + " " + std::get<1>(c) + " " + std::to_string(std::get<2>(c));
      }, sink_options{o.slow_sink});
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
  if (o.left.empty() || o.right.empty() || o.output_dir.empty()) {
    throw std::invalid_argument("join: --left, --right and --output are required");
  }
  if (o.parallelism == 0) throw std::invalid_argument("join: --parallelism must be at least 1");
  if (o.window_ms == 0) throw std::invalid_argument("join: --window-ms must be at least 1");
  // Rows cross the key exchange as (key, timestamp, payload) tuples.
  using row = std::tuple<std::string, std::uint64_t, std::string>;
  const auto side = [&](const char* name, const std::string& path) {
    return job
        .read_timed_lines(name, path, o.parallelism,
                          [](std::string_view line) { return parse_join_row(line).timestamp_ms; })
        .map<row>([](const std::string& line) {
          join_row r = parse_join_row(line);
          return row(std::move(r.key), r.timestamp_ms, std::move(r.payload));
        })
        .key_by<std::string>([](const row& r) { return std::get<0>(r); });
  };
  const auto time = [](const row& r) { return std::get<1>(r); };
  side("left", o.left)
      .window_join<row, std::string>(
          side("right", o.right), "join", o.parallelism, o.window_ms, time, time,
          [](std::uint64_t start, const std::string& key, const row& l, const row& r) {
            std::string out = std::to_string(start);
            out.append(" ").append(key).append(" ").append(std::get<2>(l)).append(" ").append(std::get<2>(r));
            return out;
          })
      .write_lines(o.output_dir, [](const std::string& line) { return line; }, sink_options{o.slow_sink});
}

}  // namespace sluice::dataflow
