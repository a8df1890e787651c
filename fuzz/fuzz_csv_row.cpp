// fuzz_csv_row: the join input's CSV row parser (dataflow/samples.hpp, parse_join_row).
//
// Input: a join input file. It is cut into lines as the job's line reader cuts it (at '\n', which
// is dropped; a '\r' stays), and every line is parsed.
//
// Properties, against the format "key,timestamp_ms,payload" read from samples.hpp:
// - a line parses exactly when it has two commas and the field between them is a decimal number
//   of 1 or more digits that fits in 64 bits; anything else throws std::invalid_argument, and
//   nothing else is ever thrown;
// - the row's key is the text before the first comma, its payload everything after the second
//   (commas and all), its timestamp the number's value;
// - the row written back as CSV parses to the same row, and is the line itself when the number has
//   no leading zero;
// - an error message stays short (it quotes at most a prefix of the line), whatever the line.

#include "fuzz_support.hpp"

#include <sluice/dataflow/samples.hpp>

#include <stdexcept>
#include <string>

using sluice::dataflow::join_row;
using sluice::dataflow::parse_join_row;

namespace {

constexpr std::size_t max_message_bytes = 200;

struct expectation {
  bool valid = false;
  std::string_view key, timestamp, payload;
  std::uint64_t value = 0;
};

expectation expected_for(std::string_view line) {
  expectation e;
  const std::size_t first = line.find(',');
  if (first == std::string_view::npos) return e;
  const std::size_t second = line.find(',', first + 1);
  if (second == std::string_view::npos) return e;
  e.key = line.substr(0, first);
  e.timestamp = line.substr(first + 1, second - first - 1);
  e.payload = line.substr(second + 1);
  if (e.timestamp.empty()) return e;
  for (char c : e.timestamp) {
    if (c < '0' || c > '9') return e;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (e.value > (UINT64_MAX - digit) / 10) return e;  // does not fit
    e.value = e.value * 10 + digit;
  }
  e.valid = true;
  return e;
}

std::string as_csv(const join_row& row) {
  std::string line = row.key;
  line.append(",").append(std::to_string(row.timestamp_ms)).append(",").append(row.payload);
  return line;
}

void check_line(std::string_view line) {
  const expectation e = expected_for(line);
  join_row row;
  try {
    row = parse_join_row(line);
  } catch (const std::invalid_argument& error) {
    const std::string_view message = error.what();
    FUZZ_REQUIRE(!e.valid, "a valid line was refused: {}", message);
    FUZZ_REQUIRE(message.size() <= max_message_bytes, "a {} byte message for a {} byte line", message.size(),
                 line.size());
    return;
  }
  FUZZ_REQUIRE(e.valid, "an invalid line was accepted: key '{}', timestamp {}", row.key, row.timestamp_ms);
  FUZZ_REQUIRE(row.key == e.key && row.payload == e.payload && row.timestamp_ms == e.value,
               "parsed as key '{}' timestamp {}, expected key '{}' timestamp {}", row.key, row.timestamp_ms, e.key,
               e.value);
  const std::string written = as_csv(row);
  const join_row again = parse_join_row(written);
  FUZZ_REQUIRE(again.key == row.key && again.timestamp_ms == row.timestamp_ms && again.payload == row.payload,
               "the row written back parses differently: '{}'", written);
  const bool canonical = e.timestamp.size() == 1 || e.timestamp[0] != '0';
  FUZZ_REQUIRE(!canonical || written == line, "written back as '{}'", written);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text = sluice::fuzz::as_text(sluice::fuzz::as_bytes(data, size));
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    check_line(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return 0;
}
