// CRC32C in software (slice-by-8 tables built at compile time) and with SSE4.2 (see crc32c.hpp).

#include <sluice/buffers/crc32c.hpp>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace sluice::buffers {

namespace {

constexpr std::uint32_t reflected_polynomial = 0x82F63B78u;

// tables[0] is the classic byte-at-a-time table; tables[k][b] is the CRC of byte b followed by k
// zero bytes, which lets the loop fold 8 bytes per step.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> tables{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? reflected_polynomial : 0u);
    tables[0][b] = crc;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t b = 0; b < 256; ++b) {
      const std::uint32_t prev = tables[k - 1][b];
      tables[k][b] = (prev >> 8) ^ tables[0][prev & 0xFFu];
    }
  }
  return tables;
}

constexpr auto tables = make_tables();

std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

bool cpu_has_sse42() noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

namespace detail {

std::uint32_t crc32c_extend_software(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  std::uint32_t state = ~crc;
  const std::byte* p = data.data();
  std::size_t left_bytes = data.size();
  while (left_bytes >= 8) {
    const std::uint64_t word = load_le64(p) ^ state;
    state = tables[7][word & 0xFF] ^ tables[6][(word >> 8) & 0xFF] ^ tables[5][(word >> 16) & 0xFF] ^
            tables[4][(word >> 24) & 0xFF] ^ tables[3][(word >> 32) & 0xFF] ^ tables[2][(word >> 40) & 0xFF] ^
            tables[1][(word >> 48) & 0xFF] ^ tables[0][word >> 56];
    p += 8;
    left_bytes -= 8;
  }
  while (left_bytes-- > 0) state = (state >> 8) ^ tables[0][(state ^ static_cast<std::uint8_t>(*p++)) & 0xFFu];
  return ~state;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) std::uint32_t crc32c_extend_hardware(std::uint32_t crc,
                                                                       std::span<const std::byte> data) noexcept {
  std::uint64_t state = ~crc;
  const std::byte* p = data.data();
  std::size_t left_bytes = data.size();
  while (left_bytes >= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, sizeof word);  // x86 is little-endian, as the CRC's byte order wants
    state = _mm_crc32_u64(state, word);
    p += 8;
    left_bytes -= 8;
  }
  auto state32 = static_cast<std::uint32_t>(state);
  while (left_bytes-- > 0) state32 = _mm_crc32_u8(state32, static_cast<std::uint8_t>(*p++));
  return ~state32;
}
#else
std::uint32_t crc32c_extend_hardware(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  return crc32c_extend_software(crc, data);
}
#endif

}  // namespace detail

bool crc32c_uses_hardware() noexcept {
  static const bool has_sse42 = cpu_has_sse42();
  return has_sse42;
}

std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) noexcept {
  return crc32c_uses_hardware() ? detail::crc32c_extend_hardware(crc, data) : detail::crc32c_extend_software(crc, data);
}

std::uint32_t crc32c(std::span<const std::byte> data) noexcept { return crc32c_extend(0, data); }

}  // namespace sluice::buffers
