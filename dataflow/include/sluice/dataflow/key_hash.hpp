#pragma once
// Hashes of record keys. stable_hash: the same in every run and on every host (FNV-1a of the key's
// codec encoding), so key_by routes a key to the same task after a restart. key_hash: the hash of a
// keyed operator's in-memory table (std::hash where the key has one, else stable_hash).

#include <sluice/buffers/codec.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace sluice::dataflow {

// A stable 64-bit hash of a key's encoding (FNV-1a). Keys of up to 256 encoded bytes are encoded on
// the stack: no allocation per record.
template <class K>
std::uint64_t stable_hash(const K& key) {
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
  std::uint64_t h = 1469598103934665603ull;
  for (std::byte b : bytes) h = (h ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
  return h;
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
