#pragma once
// record_serializer: writes length-prefixed records into buffers; a record may span buffers.
//
// Wire format: u32 little-endian length, then that many bytes (codec.hpp encoding). Records follow
// each other with no padding, and any byte of a record (its length prefix too) may fall on either
// side of a buffer boundary.
//
// Protocol (Flink's SpanningRecordSerializer): serialize() encodes the record ONCE into an internal
// scratch; copy_to(buffer) then copies as much of it as fits. The result says whether the record
// is complete and whether the buffer is full. On `buffer_full` the caller sends the buffer, gets a
// new one from its pool and calls copy_to() again to continue the same record. A record larger than
// a buffer simply takes several copy_to() calls.
//
//   ser.serialize(record);
//   while (ser.copy_to(current) == copy_result::buffer_full) { send(std::move(current)); current = next(); }

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/codec.hpp>

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice::buffers {

inline constexpr std::size_t default_max_record_bytes = 64u << 20;
inline constexpr std::size_t record_length_bytes = 4;

enum class copy_result {
  record_complete,              // the whole record is in, and the buffer has room left
  record_complete_buffer_full,  // the whole record is in, and it exactly filled the buffer
  buffer_full,                  // the buffer is full and the record continues in the next one
};

class record_serializer {
 public:
  // Records longer than max_record_bytes are refused (std::length_error) before anything is copied.
  explicit record_serializer(std::size_t max_record_bytes = default_max_record_bytes);

  // Encodes one record into the scratch. The previous record must be fully copied.
  template <codable T>
  void serialize(const T& record) {
    begin();
    try {
      const std::size_t record_bytes = codec<T>::encoded_size(record);
      check_size(record_bytes);
      scratch_.reserve(record_length_bytes + record_bytes);
      byte_writer w(scratch_);
      codec<T>::encode(w, record);
      assert(scratch_.size() == record_length_bytes + record_bytes && "codec encoded_size() disagrees with encode()");
      finish();
    } catch (...) {
      clear();
      throw;
    }
  }
  // A record whose bytes are already encoded.
  void serialize_bytes(std::span<const std::byte> record);
  // Bytes of the stream itself (length prefixes included, possibly starting or ending inside a
  // record): recovered output channel state, re-sent as it was. Copied like a record, unframed.
  void load_stream_bytes(std::span<const std::byte> bytes);

  // Copies the rest of the current record into `target` (a data buffer with room, or full).
  copy_result copy_to(buffer& target);

  // Bytes of the current record (prefix included) not yet copied.
  std::size_t pending_bytes() const noexcept { return scratch_.size() - copied_; }
  bool has_pending() const noexcept { return pending_bytes() > 0; }
  // True once part of the current record has been copied out (it spans buffers).
  bool started() const noexcept { return copied_ > 0; }
  std::size_t max_record_bytes() const noexcept { return max_record_bytes_; }
  // Drops a partly copied record (e.g. the output was cancelled).
  void clear() noexcept {
    scratch_.clear();
    copied_ = 0;
  }

 private:
  void begin();
  void check_size(std::size_t record_bytes) const;
  void finish();

  std::size_t max_record_bytes_;
  std::vector<std::byte> scratch_;  // prefix + encoded record; reused, grows to the largest record
  std::size_t copied_ = 0;
};

}  // namespace sluice::buffers
