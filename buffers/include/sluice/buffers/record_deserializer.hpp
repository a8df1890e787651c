#pragma once
// record_deserializer: turns a stream of buffers back into whole records (the inverse of
// record_serializer; same wire format: u32 little-endian length, then the bytes).
//
// Protocol: set_next_buffer() hands over the next buffer of the stream (in order); next_record*()
// then yields the records it completes, and nullopt once the buffer is used up, at which point the
// deserializer lets the buffer go (it is recycled) and wants the next one. A record entirely inside
// one buffer is returned in place, without a copy; a record that spans buffers is reassembled in a
// scratch that grows to at most `max_record_bytes`.
//
// Bad input never crashes: a length prefix above the maximum throws record_error naming both sizes,
// and the deserializer stays failed (the stream has lost its framing). A record whose bytes do not
// decode as T throws decode_error; that record is consumed and the stream continues.
//
//   des.set_next_buffer(std::move(view));
//   while (auto r = des.next_record<trade>()) handle(*r);

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/codec.hpp>
#include <sluice/buffers/record_serializer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::buffers {

// The stream's framing is broken (e.g. an oversized length prefix).
class record_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class record_deserializer {
 public:
  explicit record_deserializer(std::size_t max_record_bytes = default_max_record_bytes);

  // The next buffer of the stream; the previous one must be used up (needs_buffer()).
  void set_next_buffer(buffer_view next);
  bool needs_buffer() const noexcept { return !current_.valid() || position_ == current_.size(); }

  // The next whole record's bytes, valid until the next call; nullopt when the buffer is used up.
  // Inline for the common case (a whole record inside the current buffer, nothing half read);
  // everything else goes to next_record_bytes_slow().
  std::optional<std::span<const std::byte>> next_record_bytes() {
    const std::size_t have = left();
    if (!in_record_ && prefix_have_ == 0 && !spanning_ && !failed_ && have >= record_length_bytes) [[likely]] {
      const std::byte* at = current_.data().data() + position_;
      std::uint32_t length;
      std::memcpy(&length, at, record_length_bytes);
      length = detail::to_little(length);
      if (length <= have - record_length_bytes && length <= max_record_bytes_) [[likely]] {
        position_ += record_length_bytes + length;
        return std::span<const std::byte>(length > 0 ? at + record_length_bytes : nullptr, length);
      }
    }
    return next_record_bytes_slow();
  }
  template <codable T>
  std::optional<T> next_record() {
    auto bytes = next_record_bytes();
    if (!bytes) return std::nullopt;
    return decode_from<T>(*bytes);
  }

  // True between buffers while a record (or its length prefix) is incomplete.
  bool has_partial_record() const noexcept { return prefix_have_ > 0 || in_record_; }
  std::size_t max_record_bytes() const noexcept { return max_record_bytes_; }
  // The bytes of the current buffer not yet read, as a view (none when they are all read), for an
  // unaligned checkpoint that snapshots mid-buffer: they are in-flight data. `spanning` is set while
  // a record that spans buffers is half read (its first part is no longer in a buffer: take it with
  // partial_record()); the current buffer is then used up.
  struct unconsumed_part {
    std::optional<buffer_view> rest;
    bool spanning = false;
  };
  unconsumed_part unconsumed() const;
  // The stream bytes of the record being reassembled (its length prefix, or the part of it read so
  // far, then its bytes read so far); empty when no record is half read. With the bytes that follow
  // on the channel they make the stream again: what an unaligned checkpoint stores for the channel
  // (as Flink's getUnconsumedBuffer), and what restore_partial() takes back.
  std::vector<std::byte> partial_record() const;
  // Recovery: `bytes` are the start of a record whose rest comes with the next buffers, as
  // partial_record() gave them (shorter than a whole record). Only with no buffer and no partial
  // record. Throws record_error for a length prefix above the maximum, std::invalid_argument for
  // bytes that hold a whole record.
  void restore_partial(std::span<const std::byte> bytes);
  // Drops the current buffer and any partial record (e.g. the channel was released).
  void clear() noexcept;

 private:
  std::size_t left() const noexcept { return current_.valid() ? current_.size() - position_ : 0; }
  void start_record(std::uint32_t length);
  std::optional<std::span<const std::byte>> next_record_bytes_slow();

  std::size_t max_record_bytes_;
  buffer_view current_;
  std::size_t position_ = 0;
  std::byte prefix_[record_length_bytes] = {};
  std::size_t prefix_have_ = 0;     // bytes of a length prefix split across buffers
  bool in_record_ = false;          // the length is known, the record's bytes are being read
  std::size_t record_bytes_ = 0;    // its length
  bool spanning_ = false;           // its bytes are gathered in scratch_
  std::vector<std::byte> scratch_;  // at most max_record_bytes_
  std::string failure_;             // set once the framing is broken
  bool failed_ = false;             // !failure_.empty(), for the inline path
};

}  // namespace sluice::buffers
