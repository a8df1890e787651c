#pragma once
// What an operator under test emits: its records, the watermarks it passed on and how often it
// ended (a collector<std::string> at the end of a chain built by hand).

#include <sluice/dataflow/collector.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

struct capture final : dataflow::collector<std::string> {
  std::vector<std::string> lines;
  std::vector<std::uint64_t> watermarks;
  int ended = 0;
  void collect(const std::string& r) override { lines.push_back(r); }
  void watermark(std::uint64_t t) override { watermarks.push_back(t); }
  void end_of_data() override { ++ended; }
  // The lines since the last call.
  std::vector<std::string> take() {
    std::vector<std::string> out;
    out.swap(lines);
    return out;
  }
};

}  // namespace sluice::test
