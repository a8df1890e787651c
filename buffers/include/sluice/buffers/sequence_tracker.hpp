#pragma once
// sequence_tracker: the next expected sequence number of each open channel of one direction of a
// connection (see frame.hpp for the wire format it serves). An open-addressing table allocated once,
// bounded by max_channels; nothing is allocated after construction. Owned by one executor.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::buffers {

// The channel id of frames that address the whole connection. It is never a channel.
inline constexpr std::uint32_t connection_channel_id = 0xFFFF'FFFFu;
// The largest max_channels a decoder (and a tracker) may be configured with.
inline constexpr std::uint32_t max_channels_limit = 1u << 16;

// Which way data flows on a channel, from this side's point of view.
enum class channel_role : std::uint8_t {
  receives_data,  // registered with add_channel; the peer sends buffer, event, backlog, cancel
  sends_data,     // opened by the peer's partition request; the peer sends add-credit, cancel
};

// The next expected sequence number of each open channel of one direction of a connection. It is an
// open-addressing table allocated once, bounded by max_channels; no allocation after construction.
class sequence_tracker {
 public:
  struct entry {
    std::uint32_t channel_id = connection_channel_id;  // connection_channel_id marks a free slot
    channel_role role = channel_role::receives_data;
    std::uint64_t next_sequence = 0;
  };

  explicit sequence_tracker(std::uint32_t max_channels);

  entry* find(std::uint32_t channel_id) noexcept;
  const entry* find(std::uint32_t channel_id) const noexcept;
  // False when the channel is already there or max_channels are open. channel_id must not be
  // connection_channel_id (asserted).
  bool insert(std::uint32_t channel_id, channel_role role) noexcept;
  bool erase(std::uint32_t channel_id) noexcept;

  std::uint32_t size() const noexcept { return size_; }
  std::uint32_t max_channels() const noexcept { return max_channels_; }

 private:
  std::size_t home_slot(std::uint32_t channel_id) const noexcept;

  std::vector<entry> slots_;
  std::uint32_t size_ = 0;
  std::uint32_t max_channels_;
  unsigned hash_shift_;
};

}  // namespace sluice::buffers
