#pragma once
// What the word-count tests share: a generated corpus, the expected counts computed independently
// (plain streams and a std::map), and the lines of the published output files.

#include <sluice/dataflow/generator.hpp>
#include <sluice/dataflow/job_runner.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::test {

// `distinct` > 0: the words are that many ids (word_corpus_generator).
inline void write_corpus_file(const std::string& path, std::uint64_t lines, std::uint64_t seed,
                              std::uint64_t distinct = 0) {
  dataflow::word_corpus_generator gen(seed, distinct);
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

// The settings the job tests run with: checkpoints every 20 ms, no signal handling.
inline dataflow::job_settings test_job_settings(const std::string& checkpoint_dir, snapshot::checkpoint_mode mode,
                                                const std::string& transport) {
  dataflow::job_settings settings;
  settings.checkpoint_dir = checkpoint_dir;
  settings.checkpoint_interval = std::chrono::milliseconds(20);
  settings.mode = mode;
  settings.alignment_timeout = std::chrono::milliseconds(1);
  settings.transport = *sluice::dataflow::parse_transport(transport);
  settings.handle_signals = false;
  return settings;
}

// Channel-state bytes of a committed checkpoint directory, from its manifest ("file <name> <size>
// <crc> <operator bytes> <channel bytes>" lines); -1 when it has no manifest.
inline long long manifest_channel_bytes(const std::filesystem::path& chk) {
  std::ifstream in(chk / "_manifest");
  if (!in) return -1;
  long long total = 0;
  std::string word;
  while (in >> word) {
    if (word != "file") continue;
    std::string name, size, crc, op, ch;
    in >> name >> size >> crc >> op >> ch;
    total += std::stoll(ch);
  }
  return total;
}

}  // namespace sluice::test
