#include <sluice/buffers/record_deserializer.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cassert>
#include <cstring>

namespace sluice::buffers {

namespace {
// A scratch that grew beyond this for one huge record gives its memory back afterwards.
constexpr std::size_t keep_scratch_bytes = 1u << 20;
}  // namespace

record_deserializer::record_deserializer(std::size_t max_record_bytes) : max_record_bytes_(max_record_bytes) {
  if (max_record_bytes == 0 || max_record_bytes > UINT32_MAX) {
    throw std::invalid_argument(fmt::format(
        "record deserializer: max record size {} bytes must be between 1 and 2^32-1", max_record_bytes));
  }
}

void record_deserializer::set_next_buffer(buffer_view next) {
  assert(needs_buffer() && "set_next_buffer() before the current buffer was used up");
  if (next.valid() && next.kind() != buffer_kind::data) {
    throw std::invalid_argument("record deserializer: given an event buffer; only data buffers hold records");
  }
  current_ = std::move(next);
  position_ = 0;
}

record_deserializer::unconsumed_part record_deserializer::unconsumed() const {
  if (has_partial_record()) return {std::nullopt, true};
  if (left() == 0) return {};
  return {current_.slice(position_, left()), false};
}

std::vector<std::byte> record_deserializer::partial_record() const {
  std::vector<std::byte> out;
  if (prefix_have_ > 0) {
    out.assign(prefix_, prefix_ + prefix_have_);
  } else if (in_record_) {
    assert(left() == 0 && "a record is half read only once its buffer is used up");
    const std::uint32_t length = detail::to_little(static_cast<std::uint32_t>(record_bytes_));
    const std::size_t gathered = spanning_ ? scratch_.size() : 0;
    out.resize(record_length_bytes + gathered);  // (resize and memcpy: -O3 misreads an insert here)
    std::memcpy(out.data(), &length, record_length_bytes);
    if (gathered > 0) std::memcpy(out.data() + record_length_bytes, scratch_.data(), gathered);
  }
  return out;
}

void record_deserializer::restore_partial(std::span<const std::byte> bytes) {
  assert(!current_.valid() && !has_partial_record() && "restore_partial() on a deserializer in use");
  if (bytes.empty()) return;
  if (bytes.size() < record_length_bytes) {
    for (std::size_t i = 0; i < bytes.size(); ++i) prefix_[i] = bytes[i];
    prefix_have_ = bytes.size();
    return;
  }
  std::uint32_t length = 0;
  std::memcpy(&length, bytes.data(), record_length_bytes);
  length = detail::to_little(length);
  const std::size_t have = bytes.size() - record_length_bytes;
  if (have >= length) {
    throw std::invalid_argument(fmt::format(
        "record deserializer: restore_partial given {} bytes of a {}-byte record: it is whole", have, length));
  }
  start_record(length);
  spanning_ = true;
  scratch_.assign(bytes.begin() + record_length_bytes, bytes.end());
}

void record_deserializer::clear() noexcept {
  current_.reset();
  position_ = 0;
  prefix_have_ = 0;
  in_record_ = false;
  spanning_ = false;
  record_bytes_ = 0;
  scratch_.clear();
}

void record_deserializer::start_record(std::uint32_t length) {
  if (length > max_record_bytes_) {
    failure_ = fmt::format(
        "record deserializer: length prefix of {} bytes exceeds the maximum record size of {} bytes "
        "(corrupt stream, or raise max_record_bytes)",
        length, max_record_bytes_);
    failed_ = true;
    clear();
    throw record_error(failure_);
  }
  in_record_ = true;
  record_bytes_ = length;
  spanning_ = false;
}

std::optional<std::span<const std::byte>> record_deserializer::next_record_bytes_slow() {
  if (!failure_.empty()) throw record_error(failure_);
  if (spanning_ && !in_record_) {
    // The previous call returned the scratch; it is free again.
    spanning_ = false;
    scratch_.clear();
    if (scratch_.capacity() > keep_scratch_bytes) scratch_.shrink_to_fit();
  }

  if (!in_record_) {
    std::uint32_t length = 0;
    if (prefix_have_ == 0 && left() >= record_length_bytes) {
      std::memcpy(&length, current_.data().data() + position_, record_length_bytes);
      position_ += record_length_bytes;
    } else {
      const std::size_t n = std::min(record_length_bytes - prefix_have_, left());
      if (n > 0) std::memcpy(prefix_ + prefix_have_, current_.data().data() + position_, n);
      prefix_have_ += n;
      position_ += n;
      if (prefix_have_ < record_length_bytes) {
        current_.reset();  // used up: recycled now
        return std::nullopt;
      }
      std::memcpy(&length, prefix_, record_length_bytes);
      prefix_have_ = 0;
    }
    start_record(detail::to_little(length));
  }

  if (!spanning_ && left() >= record_bytes_) {
    // The whole record is in this buffer: no copy.
    const std::byte* start = record_bytes_ > 0 ? current_.data().data() + position_ : nullptr;
    position_ += record_bytes_;
    in_record_ = false;
    return std::span<const std::byte>(start, record_bytes_);
  }

  if (!spanning_) {
    spanning_ = true;
    scratch_.clear();
    scratch_.reserve(record_bytes_);  // bounded by max_record_bytes_
  }
  const std::size_t n = std::min(record_bytes_ - scratch_.size(), left());
  if (n > 0) {
    const std::byte* from = current_.data().data() + position_;
    scratch_.insert(scratch_.end(), from, from + n);
    position_ += n;
  }
  if (scratch_.size() < record_bytes_) {
    current_.reset();  // used up: recycled now
    return std::nullopt;
  }
  in_record_ = false;  // spanning_ stays set so the next call frees the scratch
  return std::span<const std::byte>(scratch_);
}

}  // namespace sluice::buffers
