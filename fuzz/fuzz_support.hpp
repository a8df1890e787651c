#pragma once
// What the fuzz targets share: FUZZ_REQUIRE, a property check that stops the run with a message
// (libFuzzer then saves the input as a crash), and chunk_splitter, which cuts an input into pieces
// the same way every time it sees the same input, so a failure reproduces from the input alone.
//
//   FUZZ_REQUIRE(encoded == input, "re-encoding changed {} bytes", n);
//   chunk_splitter chunks(input);
//   while (!rest.empty()) { auto piece = rest.first(chunks.next(rest.size())); ... }

#include <sluice/buffers/crc32c.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace sluice::fuzz {

[[noreturn]] inline void property_failed(const char* file, int line, const char* condition, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: property failed: %s\n  %s\n", file, line, condition, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_REQUIRE(condition, ...)                                                                   \
  do {                                                                                                 \
    if (!(condition)) ::sluice::fuzz::property_failed(__FILE__, __LINE__, #condition, fmt::format(__VA_ARGS__)); \
  } while (0)

inline std::span<const std::byte> as_bytes(const std::uint8_t* data, std::size_t size) noexcept {
  return {reinterpret_cast<const std::byte*>(data), size};
}
inline std::string_view as_text(std::span<const std::byte> bytes) noexcept {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// Chunk sizes drawn from a generator seeded by the input's CRC32C: mostly small (1..8 bytes, so
// every header is cut at every offset over a campaign), sometimes up to 64, sometimes the rest.
class chunk_splitter {
 public:
  explicit chunk_splitter(std::span<const std::byte> input) noexcept
      : state_(0x9E37'79B9'7F4A'7C15ull ^ buffers::crc32c(input) ^ (std::uint64_t{input.size()} << 32)) {}

  // 1..remaining (remaining >= 1).
  std::size_t next(std::size_t remaining) noexcept {
    const std::uint64_t r = draw();
    std::size_t n = 0;
    switch (r % 4) {
      case 0:
      case 1: n = 1 + (r >> 8) % 8; break;
      case 2: n = 1 + (r >> 8) % 64; break;
      default: n = remaining; break;
    }
    return n < remaining ? n : remaining;
  }
  bool coin() noexcept { return (draw() & 1) != 0; }

 private:
  std::uint64_t draw() noexcept {  // splitmix64
    std::uint64_t z = (state_ += 0x9E37'79B9'7F4A'7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D0'49BB'1331'11EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

}  // namespace sluice::fuzz
