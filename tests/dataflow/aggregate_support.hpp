#pragma once
// A word-counting keyed aggregate for the aggregate's tests (keyed_aggregate_test.cpp,
// stepped_end_test.cpp): (word, count) pairs out, and a collector that records what it saw.

#include "state_support.hpp"

#include <sluice/dataflow/operators.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice::test {

using counted = std::pair<std::string, std::uint64_t>;
using counter = dataflow::keyed_aggregate<std::string, std::string, std::uint64_t, counted>;

struct lines final : dataflow::collector<counted> {
  std::vector<counted> seen;
  int ends = 0;
  void collect(const counted& c) override { seen.push_back(c); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override { ++ends; }
};

inline counter::functions count_words() {
  return {[](const std::string& w) { return w; }, [](std::uint64_t& n, const std::string&) { ++n; },
          [](const std::string& w, const std::uint64_t& n) { return counted(w, n); }};
}

}  // namespace sluice::test
