#pragma once
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of the wire frame header and of
// checkpoint data files. The same value as iSCSI, ext4 and LevelDB compute; crc32c("123456789") is
// 0xE3069283.
//
// On x86-64 CPUs with SSE4.2 it uses the crc32 instruction (checked once, at run time); elsewhere a
// table-driven software version (slice-by-8). Both give identical results.
//
//   std::uint32_t c = crc32c(bytes);
//   c = crc32c_extend(c, more_bytes);        // == crc32c(bytes followed by more_bytes)

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::buffers {

// The CRC32C of `data`.
std::uint32_t crc32c(std::span<const std::byte> data) noexcept;

// Continues a checksum: crc32c_extend(crc32c(a), b) == crc32c(a ++ b). crc32c_extend(0, x) == crc32c(x).
std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> data) noexcept;

// True when crc32c() uses the SSE4.2 instruction on this CPU.
bool crc32c_uses_hardware() noexcept;

namespace detail {
// The two implementations, exposed so a test can check that they agree. crc32c_extend_hardware
// must only be called when crc32c_uses_hardware().
std::uint32_t crc32c_extend_software(std::uint32_t crc, std::span<const std::byte> data) noexcept;
std::uint32_t crc32c_extend_hardware(std::uint32_t crc, std::span<const std::byte> data) noexcept;
}  // namespace detail

}  // namespace sluice::buffers
