#pragma once
// Building task state files (snapshot/state_file.hpp) for tests, byte for byte as the channel-state
// writer lays them out, plus blocking helpers to put bytes on disk and damage them.
//
//   state_file_builder b(7, 2);
//   b.add(record_type::operator_state, 0, 0, bytes_of("offsets"));
//   write_bytes(path, b.finish());

#include <sluice/buffers/crc32c.hpp>
#include <sluice/snapshot/state_file.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::test {

inline std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<std::byte>(text[i]);
  return out;
}

// Deterministic pseudo-random bytes.
inline std::vector<std::byte> pattern_bytes(std::size_t size, unsigned seed = 1) {
  std::vector<std::byte> bytes(size);
  unsigned x = seed;
  for (auto& b : bytes) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 16);
  }
  return bytes;
}

class state_file_builder {
 public:
  state_file_builder(snapshot::checkpoint_id checkpoint, snapshot::task_id task) {
    const auto header = snapshot::encode_file_header({checkpoint, task});
    bytes_.assign(header.begin(), header.end());
  }

  state_file_builder& add(snapshot::record_type type, std::uint16_t group, std::uint32_t index,
                          std::span<const std::byte> payload) {
    const snapshot::state_record_header h{type, group, index, static_cast<std::uint32_t>(payload.size()),
                                          buffers::crc32c(payload), records_};
    const auto header = snapshot::encode_record_header(h);
    bytes_.insert(bytes_.end(), header.begin(), header.end());
    bytes_.insert(bytes_.end(), payload.begin(), payload.end());
    if (type != snapshot::record_type::end) {
      ++records_;
      payload_bytes_ += payload.size();
    }
    return *this;
  }

  // The file with its end record.
  std::vector<std::byte> finish() {
    const auto end = snapshot::encode_end_payload({records_, payload_bytes_});
    add(snapshot::record_type::end, 0, 0, end);
    return bytes_;
  }
  // The file so far, without an end record.
  const std::vector<std::byte>& unfinished() const noexcept { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
  std::uint32_t records_ = 0;
  std::uint64_t payload_bytes_ = 0;
};

inline void write_bytes(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("write_bytes '" + path + "' failed");
}

inline std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("read_bytes '" + path + "' failed");
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) out[i] = static_cast<std::byte>(chars[i]);
  return out;
}

}  // namespace sluice::test
