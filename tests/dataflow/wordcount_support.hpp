#pragma once
// What the word-count tests share: a generated corpus, the expected counts computed independently
// (plain streams and a std::map), and the lines of the published output files.

#include <sluice/dataflow/generator.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::test {

inline void write_corpus_file(const std::string& path, std::uint64_t lines, std::uint64_t seed) {
  dataflow::word_corpus_generator gen(seed);
  std::ofstream out(path);
  for (std::uint64_t i = 0; i < lines; ++i) out << gen.next_line() << '\n';
}

// Sorted "word count" lines, or "start word count" per tumbling window of `window` lines.
inline std::vector<std::string> expected_counts(const std::string& path, std::uint64_t window = 0) {
  std::ifstream in(path);
  std::map<std::pair<std::uint64_t, std::string>, std::uint64_t> counts;
  std::string line;
  std::uint64_t index = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string w;
    while (words >> w) ++counts[{window ? index - index % window : 0, w}];
    ++index;
  }
  std::vector<std::string> out;
  for (const auto& [key, n] : counts) {
    out.push_back(window ? std::to_string(key.first) + " " + key.second + " " + std::to_string(n)
                         : key.second + " " + std::to_string(n));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every line of the published files in `dir` (names not starting with '.' or '_'), sorted.
inline std::vector<std::string> published_lines(const std::string& dir) {
  std::vector<std::string> out;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || name[0] == '_') continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace sluice::test
