#include <sluice/dataflow/samples.hpp>
#include <sluice/dataflow/sinks.hpp>

#include <stdexcept>
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
        .aggregate<std::uint64_t, counted_word>(
            "count", o.parallelism, [](std::uint64_t& n, const std::string&) { ++n; },
            [](const std::string& w, const std::uint64_t& n) { return counted_word(w, n); })
        .write_lines(o.output_dir, [](const counted_word& c) { return c.first + " " + std::to_string(c.second); });
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
      });
}

}  // namespace sluice::dataflow
