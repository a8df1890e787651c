#include <sluice/buffers/codec.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace sluice::buffers;

namespace {

struct trade {
  std::uint64_t id = 0;
  double price = 0;
  std::string venue;
  std::vector<std::int32_t> fills;
  static constexpr auto fields() { return std::make_tuple(&trade::id, &trade::price, &trade::venue, &trade::fills); }
  bool operator==(const trade&) const = default;
};

struct no_codec {
  int x;
};

static_assert(codable<int>);
static_assert(codable<std::tuple<int, std::string, std::pair<bool, double>>>);
static_assert(codable<trade>);
static_assert(!codable<no_codec>);
static_assert(!codable<std::vector<no_codec>>);

template <class T>
T round_trip(const T& value) {
  std::vector<std::byte> bytes;
  encode_to(bytes, value);
  REQUIRE(bytes.size() == codec<T>::encoded_size(value));
  return decode_from<T>(bytes);
}

}  // namespace

TEMPLATE_TEST_CASE("every arithmetic type round trips at its extremes", "[codec]", bool, char, std::int8_t,
                   std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t, std::int64_t,
                   std::uint64_t, float, double) {
  using limits = std::numeric_limits<TestType>;
  for (TestType v : {limits::min(), limits::max(), limits::lowest(), TestType{}, TestType(1)}) {
    REQUIRE(round_trip(v) == v);
  }
  REQUIRE(codec<TestType>::encoded_size(TestType{}) == sizeof(TestType));
}

TEST_CASE("numbers are encoded little-endian with a fixed width", "[codec]") {
  std::vector<std::byte> bytes;
  encode_to(bytes, std::uint32_t{0x11223344});
  REQUIRE(bytes == std::vector<std::byte>{std::byte{0x44}, std::byte{0x33}, std::byte{0x22}, std::byte{0x11}});
  bytes.clear();
  encode_to(bytes, -1.5);
  REQUIRE(bytes.size() == 8);
  REQUIRE(bytes[7] == std::byte{0xbf});  // sign and exponent of -1.5 in the top byte
}

TEST_CASE("strings, vectors, pairs, tuples and field-listing aggregates round trip", "[codec]") {
  REQUIRE(round_trip(std::string()) == "");
  REQUIRE(round_trip(std::string("sluice\0gate", 11)) == std::string("sluice\0gate", 11));
  REQUIRE(round_trip(std::string(100000, 'z')) == std::string(100000, 'z'));
  REQUIRE(round_trip(std::vector<std::string>{"a", "", "bc"}) == std::vector<std::string>{"a", "", "bc"});
  REQUIRE(round_trip(std::pair<int, std::string>{-7, "seven"}) == std::pair<int, std::string>{-7, "seven"});
  const auto t = std::make_tuple(std::uint8_t{3}, std::string("x"), std::make_pair(true, 2.5), std::int64_t{-1});
  REQUIRE(round_trip(t) == t);
  const trade tr{42, 101.25, "XETRA", {1, -2, 3}};
  REQUIRE(round_trip(tr) == tr);
  REQUIRE(codec<trade>::encoded_size(tr) == 8 + 8 + 4 + 5 + 4 + 3 * 4);
}

TEST_CASE("decoding short or corrupt bytes throws a decode_error naming what was read", "[codec]") {
  std::vector<std::byte> bytes;
  encode_to(bytes, std::string("hello"));
  bytes.pop_back();
  REQUIRE_THROWS_WITH(decode_from<std::string>(bytes), Catch::Contains("string") && Catch::Contains("needs 5 bytes, 4 left"));

  // A length prefix claiming 4 GiB must fail on the check, not on an allocation.
  const std::vector<std::byte> huge{std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff}};
  REQUIRE_THROWS_AS(decode_from<std::string>(huge), decode_error);
  REQUIRE_THROWS_WITH(decode_from<std::vector<std::uint64_t>>(huge), Catch::Contains("4294967295 elements"));

  const std::vector<std::byte> two{std::byte{2}};
  REQUIRE_THROWS_WITH(decode_from<bool>(two), Catch::Contains("neither 0 nor 1"));

  std::vector<std::byte> longer;
  encode_to(longer, std::uint64_t{1});
  REQUIRE_THROWS_WITH(decode_from<std::uint32_t>(longer), Catch::Contains("4 bytes more"));
}

// std::vector<std::byte> is encoded in one piece (a u32 count, then the bytes), exactly as the
// element-wise vector encoding wrote it, so states and backlogs of earlier checkpoints still decode.
TEST_CASE("a byte vector is a count then its bytes, in one piece, and a short one is refused", "[codec]") {
  std::vector<std::byte> value;
  for (int i = 0; i < 300; ++i) value.push_back(static_cast<std::byte>(i * 7));
  std::vector<std::byte> encoded;
  encode_to(encoded, value);
  REQUIRE(encoded.size() == 4 + value.size());
  CHECK(encoded[0] == std::byte{0x2c});  // 300 = 0x012c, little-endian
  CHECK(encoded[1] == std::byte{0x01});
  CHECK(encoded[2] == std::byte{0});
  CHECK(encoded[3] == std::byte{0});
  CHECK(std::vector<std::byte>(encoded.begin() + 4, encoded.end()) == value);
  CHECK(codec<std::vector<std::byte>>::encoded_size(value) == encoded.size());
  CHECK(decode_from<std::vector<std::byte>>(encoded) == value);
  // In a pair, as the output backlog keeps its records.
  const std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> records{{3, value}, {0, {}}};
  std::vector<std::byte> both;
  encode_to(both, records);
  CHECK((decode_from<std::vector<std::pair<std::uint64_t, std::vector<std::byte>>>>(both)) == records);
  encoded.pop_back();
  CHECK_THROWS_AS(decode_from<std::vector<std::byte>>(encoded), decode_error);
}
