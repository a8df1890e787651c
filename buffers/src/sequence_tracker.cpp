// sequence_tracker (see sequence_tracker.hpp).

#include <sluice/buffers/sequence_tracker.hpp>

#include <bit>
#include <cassert>
#include <utility>

namespace sluice::buffers {

sequence_tracker::sequence_tracker(std::uint32_t max_channels) : max_channels_(max_channels) {
  assert(max_channels >= 1 && max_channels <= max_channels_limit);
  // At most half full, so a probe always ends at a free slot within a few steps.
  const std::size_t slot_count = std::bit_ceil(std::size_t{2} * max_channels);
  slots_.resize(slot_count);
  hash_shift_ = 64u - static_cast<unsigned>(std::countr_zero(slot_count));
}

std::size_t sequence_tracker::home_slot(std::uint32_t channel_id) const noexcept {
  // Fibonacci hashing: spreads sequential ids (the common case) over the table.
  return static_cast<std::size_t>((channel_id * 0x9E37'79B9'7F4A'7C15ull) >> hash_shift_);
}

sequence_tracker::entry* sequence_tracker::find(std::uint32_t channel_id) noexcept {
  return const_cast<entry*>(std::as_const(*this).find(channel_id));
}

const sequence_tracker::entry* sequence_tracker::find(std::uint32_t channel_id) const noexcept {
  if (channel_id == connection_channel_id) return nullptr;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = home_slot(channel_id);; i = (i + 1) & mask) {
    if (slots_[i].channel_id == channel_id) return &slots_[i];
    if (slots_[i].channel_id == connection_channel_id) return nullptr;
  }
}

bool sequence_tracker::insert(std::uint32_t channel_id, channel_role role) noexcept {
  assert(channel_id != connection_channel_id);
  if (size_ == max_channels_ || find(channel_id) != nullptr) return false;
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = home_slot(channel_id);
  while (slots_[i].channel_id != connection_channel_id) i = (i + 1) & mask;
  slots_[i] = entry{channel_id, role, 0};
  ++size_;
  return true;
}

bool sequence_tracker::erase(std::uint32_t channel_id) noexcept {
  entry* found = find(channel_id);
  if (found == nullptr) return false;
  // Backward-shift deletion: pull later entries of the probe run into the hole, so no tombstones.
  const std::size_t mask = slots_.size() - 1;
  std::size_t hole = static_cast<std::size_t>(found - slots_.data());
  for (std::size_t j = (hole + 1) & mask; slots_[j].channel_id != connection_channel_id; j = (j + 1) & mask) {
    const std::size_t home = home_slot(slots_[j].channel_id);
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    slots_[hole] = slots_[j];
    hole = j;
  }
  slots_[hole] = entry{};
  --size_;
  return true;
}

}  // namespace sluice::buffers
