// CRC32C (buffers/crc32c.hpp), which every frame header and checkpoint file uses: the standard
// check value, RFC 3720's vectors, piecewise extension, and hardware and software agreeing.

#include <sluice/buffers/crc32c.hpp>

#include <catch2/catch.hpp>

#include <random>
#include <span>
#include <string_view>
#include <vector>

using namespace sluice::buffers;

namespace {

using bytes = std::vector<std::byte>;

std::span<const std::byte> as_span(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

}  // namespace

TEST_CASE("crc32c of \"123456789\" is the standard check value 0xE3069283", "[crc32c]") {
  CHECK(crc32c(as_span("123456789")) == 0xE3069283u);
  CHECK(detail::crc32c_extend_software(0, as_span("123456789")) == 0xE3069283u);
  CHECK(crc32c({}) == 0u);
}

TEST_CASE("crc32c matches the RFC 3720 test vectors", "[crc32c]") {
  bytes zeros(32, std::byte{0x00}), ones(32, std::byte{0xFF}), up(32), down(32);
  for (std::size_t i = 0; i < 32; ++i) {
    up[i] = static_cast<std::byte>(i);
    down[i] = static_cast<std::byte>(31 - i);
  }
  CHECK(crc32c(zeros) == 0x8A9136AAu);
  CHECK(crc32c(ones) == 0x62A8AB43u);
  CHECK(crc32c(up) == 0x46DD794Eu);
  CHECK(crc32c(down) == 0x113FDB5Cu);
}

TEST_CASE("crc32c extended piece by piece equals crc32c of the whole", "[crc32c]") {
  const std::string_view text = "The quick brown fox jumps over the lazy dog, then again and again.";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    const std::uint32_t first = crc32c(as_span(text.substr(0, cut)));
    REQUIRE(crc32c_extend(first, as_span(text.substr(cut))) == crc32c(as_span(text)));
  }
}

TEST_CASE("crc32c in hardware and in software agree at every length and alignment", "[crc32c]") {
  if (!crc32c_uses_hardware()) SUCCEED("no SSE4.2 on this CPU: only the software path runs");
  std::mt19937 random(20240607);
  bytes data(1100);
  for (auto& b : data) b = static_cast<std::byte>(random());
  for (std::size_t offset = 0; offset < 9; ++offset) {
    for (std::size_t size_bytes = 0; size_bytes + offset <= data.size(); size_bytes += 1 + size_bytes / 8) {
      const auto piece = std::span(data).subspan(offset, size_bytes);
      const std::uint32_t software = detail::crc32c_extend_software(0x12345678u, piece);
      REQUIRE(crc32c_extend(0x12345678u, piece) == software);
      if (crc32c_uses_hardware()) REQUIRE(detail::crc32c_extend_hardware(0x12345678u, piece) == software);
    }
  }
}
