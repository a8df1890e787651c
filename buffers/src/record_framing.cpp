#include <sluice/buffers/record_framing.hpp>

#include <sluice/buffers/codec.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

namespace sluice::buffers {

void record_framing::feed(std::span<const std::byte> bytes) {
  std::size_t at = 0;
  while (at < bytes.size() && !fault_) {
    if (in_body_) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(body_left_, bytes.size() - at));
      at += n;
      offset_ += n;
      body_left_ -= n;
      if (body_left_ == 0) {
        in_body_ = false;
        ++records_;
      }
      continue;
    }
    if (prefix_have_ == 0) record_start_ = offset_;
    const std::size_t n = std::min(record_length_bytes - prefix_have_, bytes.size() - at);
    std::memcpy(prefix_ + prefix_have_, bytes.data() + at, n);
    prefix_have_ += n;
    at += n;
    offset_ += n;
    if (prefix_have_ < record_length_bytes) continue;
    std::uint32_t length = 0;
    std::memcpy(&length, prefix_, sizeof length);
    length = detail::to_little(length);
    prefix_have_ = 0;
    if (length > max_record_bytes_) {
      fault_ = fmt::format("the record at byte {} claims {} bytes, above the maximum record size of {} bytes",
                           record_start_, length, max_record_bytes_);
      return;
    }
    if (length == 0) {
      ++records_;
    } else {
      in_body_ = true;
      body_left_ = length;
    }
  }
}

std::optional<std::string> record_framing::finish() const {
  if (fault_) return fault_;
  if (in_body_) {
    return fmt::format("the stream ends inside the record at byte {} ({} of its bytes are missing)", record_start_,
                       body_left_);
  }
  if (prefix_have_ > 0) {
    return fmt::format("the stream ends inside the length of the record at byte {}", record_start_);
  }
  return std::nullopt;
}

}  // namespace sluice::buffers
