#pragma once
// What the join tests share: seeded CSV inputs and the expected output of a nested-loop join.

#include <sluice/dataflow/generator.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace sluice::test {

inline void write_join_file(const std::string& path, std::uint64_t rows, std::uint64_t keys, std::uint64_t span_ms,
                            std::uint64_t seed, const std::string& prefix) {
  const dataflow::join_input_spec spec{rows, keys, span_ms, seed, prefix};
  std::ofstream out(path);
  for (std::uint64_t n = 0; n < rows; ++n) out << dataflow::join_input_line(spec, n) << '\n';
}

struct csv_row {
  std::string key;
  std::uint64_t time = 0;
  std::string payload;
};

inline std::vector<csv_row> read_csv(const std::string& path) {
  std::vector<csv_row> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(',');
    const auto b = line.find(',', a + 1);
    rows.push_back({line.substr(0, a), std::stoull(line.substr(a + 1, b - a - 1)), line.substr(b + 1)});
  }
  return rows;
}

// Sorted "window_start key left_payload right_payload" lines: every pair, by a plain nested loop.
inline std::vector<std::string> nested_loop_join(const std::string& left, const std::string& right,
                                                 std::uint64_t window) {
  const std::vector<csv_row> l = read_csv(left);
  const std::vector<csv_row> r = read_csv(right);
  std::vector<std::string> out;
  for (const csv_row& a : l) {
    const std::uint64_t start = a.time - a.time % window;
    for (const csv_row& b : r) {
      if (start == b.time - b.time % window && a.key == b.key) {
        out.push_back(std::to_string(start) + " " + a.key + " " + a.payload + " " + b.payload);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace sluice::test
