// record_framing: the check recovery runs over a channel's recovered stream. Bytes fed in any
// chunking must frame whole records, each no longer than the maximum; a fault names its byte offset.

#include <sluice/buffers/record_framing.hpp>
#include <sluice/buffers/record_serializer.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

using namespace sluice::buffers;

namespace {

// The wire format of `sizes` records (u32 little-endian length, then that many bytes).
std::vector<std::byte> stream_of(const std::vector<std::size_t>& sizes) {
  std::vector<std::byte> out;
  for (std::size_t size : sizes) {
    const std::uint32_t length = static_cast<std::uint32_t>(size);
    const std::size_t at = out.size();
    out.resize(at + record_length_bytes + size, std::byte{0x5a});
    std::memcpy(out.data() + at, &length, record_length_bytes);
  }
  return out;
}

// Feeds `bytes` in chunks whose sizes come from `rng` (1 to max_chunk bytes).
void feed_chunked(record_framing& f, std::span<const std::byte> bytes, std::mt19937& rng, std::size_t max_chunk) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t n = std::min<std::size_t>(1 + rng() % max_chunk, bytes.size() - at);
    f.feed(bytes.subspan(at, n));
    at += n;
  }
}

}  // namespace

TEST_CASE("whole records pass in any chunking, one byte at a time too, and are counted", "[record_framing]") {
  const std::vector<std::size_t> sizes{0, 1, 3, 4, 5, 100, 4092, 4096, 3 * 4096 + 1, 0, 0, 7};
  const std::vector<std::byte> bytes = stream_of(sizes);
  const auto seed = GENERATE(1u, 2u, 3u);
  const std::size_t max_chunk = GENERATE(std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{5000},
                                         std::size_t{100000});
  CAPTURE(seed, max_chunk);
  std::mt19937 rng(seed);
  record_framing f(3 * 4096 + 1);
  feed_chunked(f, bytes, rng, max_chunk);
  REQUIRE(f.finish() == std::nullopt);
  REQUIRE(f.records() == sizes.size());
}

TEST_CASE("empty input, and empty chunks, pass with no records", "[record_framing]") {
  record_framing f(100);
  REQUIRE(f.finish() == std::nullopt);
  f.feed({});
  REQUIRE(f.finish() == std::nullopt);
  REQUIRE(f.records() == 0);
  // An empty chunk in the middle of a prefix changes nothing.
  const std::vector<std::byte> one = stream_of({2});
  f.feed(std::span<const std::byte>(one).first(2));
  f.feed({});
  f.feed(std::span<const std::byte>(one).subspan(2));
  REQUIRE(f.finish() == std::nullopt);
  REQUIRE(f.records() == 1);
}

TEST_CASE("zero-length records are whole with their prefix alone", "[record_framing]") {
  const std::vector<std::byte> bytes = stream_of({0, 0, 0, 0, 0});
  REQUIRE(bytes.size() == 5 * record_length_bytes);
  record_framing f(1);
  for (std::byte b : bytes) f.feed({&b, 1});
  REQUIRE(f.finish() == std::nullopt);
  REQUIRE(f.records() == 5);
}

TEST_CASE("a stream cut inside a length prefix fails naming the record's byte offset", "[record_framing]") {
  const std::vector<std::byte> bytes = stream_of({10, 0, 20});
  // The third record's prefix starts at byte 14 + 4 = 18.
  const std::size_t cut = GENERATE(std::size_t{19}, std::size_t{20}, std::size_t{21});
  CAPTURE(cut);
  record_framing f(100);
  f.feed(std::span<const std::byte>(bytes).first(cut));
  const std::optional<std::string> fault = f.finish();
  REQUIRE(fault.has_value());
  REQUIRE_THAT(*fault, Catch::Contains("ends inside the length of the record at byte 18"));
  REQUIRE(f.records() == 2);
}

TEST_CASE("a stream cut inside a record's bytes fails naming its offset and the bytes missing", "[record_framing]") {
  const std::vector<std::byte> bytes = stream_of({10, 4096 * 2});
  // The second record starts at byte 14; its bytes at 18 .. 18 + 8192.
  const std::size_t cut = GENERATE(std::size_t{18}, std::size_t{19}, std::size_t{4096}, std::size_t{18 + 8191});
  CAPTURE(cut);
  std::mt19937 rng(static_cast<std::uint32_t>(cut));
  record_framing f(1u << 20);
  feed_chunked(f, std::span<const std::byte>(bytes).first(cut), rng, 700);
  const std::optional<std::string> fault = f.finish();
  REQUIRE(fault.has_value());
  const std::size_t missing = 18 + 8192 - cut;
  REQUIRE_THAT(*fault, Catch::Contains("ends inside the record at byte 14 (" + std::to_string(missing) +
                                       " of its bytes are missing)"));
  REQUIRE(f.records() == 1);
}

TEST_CASE("a length above the maximum fails naming the record's offset, its length and the maximum",
          "[record_framing]") {
  // The maximum itself is fine; one more byte is not.
  record_framing at_max(100);
  at_max.feed(stream_of({100}));
  REQUIRE(at_max.finish() == std::nullopt);

  std::vector<std::byte> bytes = stream_of({3, 101, 2});
  record_framing f(100);
  std::mt19937 rng(9);
  feed_chunked(f, bytes, rng, 2);
  const std::optional<std::string> fault = f.finish();
  REQUIRE(fault.has_value());
  REQUIRE_THAT(*fault, Catch::Contains("record at byte 7 claims 101 bytes") &&
                           Catch::Contains("maximum record size of 100 bytes"));
  // Nothing after the fault counts: the framing is lost.
  REQUIRE(f.records() == 1);
  f.feed(stream_of({1}));
  REQUIRE(f.finish() == fault);
  REQUIRE(f.records() == 1);
}
