#pragma once
// Hashes of record keys. stable_hash: the same in every run and on every host (FNV-1a of the key's
// codec encoding), so key_by routes a key to the same task after a restart. key_hash: the hash of a
// keyed operator's in-memory table (std::hash where the key has one, else stable_hash).

#include <sluice/buffers/codec.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace sluice::dataflow {

namespace detail {
inline constexpr std::uint64_t fnv_offset = 1469598103934665603ull;
inline constexpr std::uint64_t fnv_prime = 1099511628211ull;
inline std::uint64_t fnv1a(std::uint64_t h, const unsigned char* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * fnv_prime;
  return h;
}
}  // namespace detail

// A stable 64-bit hash of a key's encoding (FNV-1a). Keys of up to 256 encoded bytes are encoded on
// the stack: no allocation per record. A string (the commonest key) is hashed in place: its encoding
// is its length as a little-endian u32, then its bytes (codec<std::string>), and the hash is FNV-1a
// of exactly those bytes, without copying them.
template <class K>
std::uint64_t stable_hash(const K& key) {
  if constexpr (std::is_same_v<K, std::string>) {
    const std::uint32_t length = buffers::detail::to_little(buffers::detail::checked_u32(key.size(), "string"));
    unsigned char prefix[sizeof length];
    std::memcpy(prefix, &length, sizeof length);
    const std::uint64_t h = detail::fnv1a(detail::fnv_offset, prefix, sizeof prefix);
    return detail::fnv1a(h, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  } else {
    const std::size_t n = buffers::codec<K>::encoded_size(key);
    std::array<std::byte, 256> small;
    std::vector<std::byte> large;
    std::span<std::byte> bytes(small.data(), n <= small.size() ? n : 0);
    if (n > small.size()) {
      large.resize(n);
      bytes = large;
    }
    buffers::byte_writer w(bytes);
    buffers::codec<K>::encode(w, key);
    return detail::fnv1a(detail::fnv_offset, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  }
}

template <class K>
struct key_hash {
  std::size_t operator()(const K& key) const {
    if constexpr (requires { std::hash<K>{}(key); }) {
      return std::hash<K>{}(key);
    } else {
      return static_cast<std::size_t>(stable_hash(key));
    }
  }
};

}  // namespace sluice::dataflow
