#include <sluice/buffers/record_serializer.hpp>

#include <fmt/core.h>

#include <cassert>
#include <cstring>
#include <stdexcept>

namespace sluice::buffers {

record_serializer::record_serializer(std::size_t max_record_bytes) : max_record_bytes_(max_record_bytes) {
  if (max_record_bytes == 0 || max_record_bytes > UINT32_MAX) {
    throw std::invalid_argument(fmt::format(
        "record serializer: max record size {} bytes must be between 1 and 2^32-1", max_record_bytes));
  }
}

void record_serializer::begin() {
  assert(!has_pending() && "serialize() before the previous record was fully copied");
  scratch_.clear();
  copied_ = 0;
  scratch_.resize(record_length_bytes);  // the prefix, filled in by finish()
}

void record_serializer::check_size(std::size_t record_bytes) const {
  if (record_bytes > max_record_bytes_) {
    throw std::length_error(fmt::format("record serializer: record of {} bytes exceeds the maximum of {} bytes",
                                        record_bytes, max_record_bytes_));
  }
}

void record_serializer::finish() {
  const std::size_t length = scratch_.size() - record_length_bytes;
  check_size(length);
  std::uint32_t prefix = detail::to_little(static_cast<std::uint32_t>(length));
  std::memcpy(scratch_.data(), &prefix, sizeof prefix);
}

void record_serializer::serialize_bytes(std::span<const std::byte> record) {
  begin();
  try {
    check_size(record.size());
    scratch_.insert(scratch_.end(), record.begin(), record.end());
    finish();
  } catch (...) {
    clear();
    throw;
  }
}

void record_serializer::load_stream_bytes(std::span<const std::byte> bytes) {
  assert(!has_pending() && "load_stream_bytes() before the previous record was fully copied");
  scratch_.assign(bytes.begin(), bytes.end());
  copied_ = 0;
}

copy_result record_serializer::copy_to(buffer& target) {
  assert(target.valid() && target.kind() == buffer_kind::data);
  assert(has_pending() && "copy_to() with no record serialized");
  copied_ += target.append(std::span<const std::byte>(scratch_).subspan(copied_));
  if (copied_ < scratch_.size()) {
    assert(target.full());
    return copy_result::buffer_full;
  }
  scratch_.clear();
  copied_ = 0;
  return target.full() ? copy_result::record_complete_buffer_full : copy_result::record_complete;
}

}  // namespace sluice::buffers
