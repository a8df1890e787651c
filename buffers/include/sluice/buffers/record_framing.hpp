#pragma once
// record_framing: checks that bytes fed in stream order (any chunking) frame whole records of the
// wire format (record_serializer.hpp: u32 little-endian length, then the bytes), each no longer
// than a maximum. Recovery runs it over each channel's recovered stream (the receiver's state,
// then the sender's) before a checkpoint is trusted: a checkpoint whose channel state would end
// inside a record, or hold an impossible length, is not restored.
//
//   record_framing f(max_record_bytes);
//   f.feed(receiver_part); f.feed(sender_part);
//   if (auto fault = f.finish()) reject(*fault);

#include <sluice/buffers/record_serializer.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace sluice::buffers {

class record_framing {
 public:
  explicit record_framing(std::size_t max_record_bytes) : max_record_bytes_(max_record_bytes) {}

  void feed(std::span<const std::byte> bytes);
  // Nothing when the bytes fed were whole records; else what is wrong, with the byte offset.
  std::optional<std::string> finish() const;
  std::uint64_t records() const noexcept { return records_; }

 private:
  std::size_t max_record_bytes_;
  std::uint64_t offset_ = 0;         // bytes fed so far
  std::uint64_t record_start_ = 0;   // where the current record (or prefix) began
  std::byte prefix_[record_length_bytes] = {};
  std::size_t prefix_have_ = 0;
  std::uint64_t body_left_ = 0;      // bytes of the current record still to come
  bool in_body_ = false;
  std::uint64_t records_ = 0;
  std::optional<std::string> fault_;
};

}  // namespace sluice::buffers
