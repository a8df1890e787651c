#pragma once
// The wire frame of remote channels: one TCP connection between two processes carries all their
// channels as a stream of frames. This is a pure codec, without sockets. The encode_* functions write
// frames into caller-provided arrays. frame_decoder turns received bytes back into frames. It rejects
// a malformed stream with a named fault, and the connection is then closed (docs/design.md invariant 9).
//
// Header: 28 bytes, little-endian, followed by `payload length` bytes of payload.
//   offset size field
//    0     4    magic "SLCE"
//    4     2    version, 1
//    6     1    frame type
//    7     1    flags: bit 0 = priority (event frames only); every other bit must be 0
//    8     4    channel id; 0xFFFFFFFF is the connection itself (close frames only)
//   12     4    payload length in bytes
//   16     8    sequence number
//   24     4    CRC32C of bytes 0..23 (the payload is not covered: TCP checksums it)
//
// Frame types. R is a channel's data receiver and S is its sender. Payload fields are little-endian.
//   1 partition_request  R->S  16 bytes: partition id u64, subpartition index u32, initial credits u32
//   2 buffer             S->R  1..max_payload_bytes: serialized records
//   3 event              S->R  1..max_payload_bytes: opaque here (end-of-partition, barrier, ...)
//   4 add_credit         R->S  4 bytes: credits u32, at least 1
//   5 backlog            S->R  4 bytes: buffers queued in the subpartition u32
//   6 cancel             both  0 bytes
//   7 close              conn  0..256 bytes: the reason, UTF-8 text
//
// Channel protocol:
// - Opening. A receiver picks a channel id that is unique on the connection in both directions (the
//   side that connected uses even ids, the side that accepted uses odd ids). It opens the channel
//   with a partition_request.
// - Sequence numbers. Every frame on a channel carries one, counted per channel and per direction
//   from 0. Control frames count too: the partition request is frame 0 of R->S. So a lost,
//   duplicated or reordered frame of any type is detected, and a lost add-credit is never a silent
//   stall.
// - Ending. A channel ends with a cancel handshake. R sends cancel, after end-of-partition or to give
//   up. S stops sending and answers with cancel. Each side's decoder forgets the channel at the
//   cancel that it receives, so frames still in flight before the answer are accepted.
// - Close. Close ends the connection. It carries channel 0xFFFFFFFF and sequence 0, and no byte may
//   follow it.
//
// Decoding, with the payload received straight into a credited buffer (no intermediate copy):
//   frame_decoder decoder({.max_payload_bytes = 32 * 1024, .max_channels = 4096});
//   decoder.add_channel(id);                  // before sending that channel's partition request
//   for (;;) switch (decoder.next(chunk)) {   // consumes bytes of `chunk`
//     case decode_step::need_input: receive the next chunk;
//     case decode_step::control:    handle(decoder.control()); break;
//     case decode_step::payload:    // header(): payload_bytes for channel_id
//       decoder.take_payload(chunk, buffer);  // the part already in the chunk
//       recv the rest into buffer at payload_received_bytes(), then payload_received(n); break;
//     case decode_step::failed:     close the connection with decoder.error().message();
//   }
//   at the end of the stream: decoder.finish() fails if the peer stopped mid-frame.

#include <sluice/buffers/sequence_tracker.hpp>
#include <sluice/io/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <variant>
#include <vector>

namespace sluice::buffers {

inline constexpr std::size_t frame_header_bytes = 28;
inline constexpr std::array<std::byte, 4> frame_magic = {std::byte{'S'}, std::byte{'L'}, std::byte{'C'},
                                                         std::byte{'E'}};
inline constexpr std::uint16_t frame_version = 1;
inline constexpr std::uint32_t max_close_reason_bytes = 256;
// The largest max_payload_bytes a decoder may be configured with.
inline constexpr std::uint32_t max_payload_limit_bytes = 64u * 1024 * 1024;

enum class frame_type : std::uint8_t {
  partition_request = 1,
  buffer = 2,
  event = 3,
  add_credit = 4,
  backlog = 5,
  cancel = 6,
  close = 7,
};
// "partition-request", "buffer", ...; "unknown" for a value outside the enum.
std::string_view to_string(frame_type type) noexcept;
// Buffer and event frames carry data whose payload goes to a caller's buffer; the others are control.
constexpr bool is_data_frame(frame_type type) noexcept {
  return type == frame_type::buffer || type == frame_type::event;
}

namespace frame_flags {
// On an event: a priority event (a barrier) that has overtaken queued buffers.
inline constexpr std::uint8_t priority = 0x01;
}  // namespace frame_flags

struct frame_header {
  frame_type type = frame_type::buffer;
  std::uint8_t flags = 0;
  std::uint32_t channel_id = 0;
  std::uint64_t sequence = 0;
  std::uint32_t payload_bytes = 0;
  friend bool operator==(const frame_header&, const frame_header&) = default;
};

using header_bytes = std::array<std::byte, frame_header_bytes>;

// Writes `header` and its checksum into `out`. The header must obey its type's rules (see the top
// comment), with max_payload_limit_bytes as the data bound; anything else is a bug (asserted).
void encode_header(const frame_header& header, header_bytes& out) noexcept;

// Control payloads.
struct partition_request {
  std::uint64_t partition_id = 0;
  std::uint32_t subpartition_index = 0;
  std::uint32_t initial_credits = 0;
  friend bool operator==(const partition_request&, const partition_request&) = default;
};
struct add_credit {
  std::uint32_t credits = 0;
  friend bool operator==(const add_credit&, const add_credit&) = default;
};
struct backlog_announcement {
  std::uint32_t backlog_buffers = 0;
  friend bool operator==(const backlog_announcement&, const backlog_announcement&) = default;
};
struct cancel_channel {
  friend bool operator==(const cancel_channel&, const cancel_channel&) = default;
};
struct close_connection {
  std::string_view reason;  // in a decoded frame: valid until the decoder's next call
  friend bool operator==(const close_connection&, const close_connection&) = default;
};
using control_payload =
    std::variant<partition_request, add_credit, backlog_announcement, cancel_channel, close_connection>;

struct control_frame {
  frame_header header;
  control_payload payload;
};

inline constexpr std::size_t max_control_frame_bytes = frame_header_bytes + max_close_reason_bytes;

// A whole control frame, header and payload, ready for one write.
struct encoded_frame {
  std::array<std::byte, max_control_frame_bytes> storage{};
  std::size_t size_bytes = 0;
  std::span<const std::byte> bytes() const noexcept { return {storage.data(), size_bytes}; }
};

encoded_frame encode_partition_request(std::uint32_t channel_id, std::uint64_t sequence,
                                       const partition_request& request) noexcept;
// credit.credits must be at least 1 (asserted).
encoded_frame encode_add_credit(std::uint32_t channel_id, std::uint64_t sequence, add_credit credit) noexcept;
encoded_frame encode_backlog(std::uint32_t channel_id, std::uint64_t sequence, backlog_announcement backlog) noexcept;
encoded_frame encode_cancel(std::uint32_t channel_id, std::uint64_t sequence) noexcept;
// A reason longer than max_close_reason_bytes is cut there, at a UTF-8 character boundary.
encoded_frame encode_close(std::string_view reason) noexcept;

// Why a decoder rejected its input. Each value is an std::error_code in frame_category().
enum class frame_fault : std::uint8_t {
  bad_magic = 1,
  unsupported_version,
  header_checksum_mismatch,
  unknown_type,
  unknown_flags,
  oversized_payload,       // a buffer or event payload above max_payload_bytes
  invalid_payload_length,  // a payload length that the frame type does not allow
  invalid_payload,         // a control payload with an impossible value (add-credit of 0)
  unknown_channel,
  channel_already_open,  // a partition request for an open channel
  too_many_channels,     // a partition request beyond max_channels
  wrong_direction,       // e.g. a buffer frame on a channel that this side sends on
  out_of_sequence,
  data_after_close,
  truncated,  // the peer disconnected mid-frame
};
inline constexpr int frame_fault_count = 15;
std::string_view to_string(frame_fault fault) noexcept;
const std::error_category& frame_category() noexcept;
inline std::error_code make_error_code(frame_fault f) noexcept { return {static_cast<int>(f), frame_category()}; }

}  // namespace sluice::buffers

template <>
struct std::is_error_code_enum<sluice::buffers::frame_fault> : std::true_type {};

namespace sluice::buffers {

struct frame_decoder_config {
  std::uint32_t max_payload_bytes = 32 * 1024;  // the largest buffer or event payload accepted
  std::uint32_t max_channels = 4096;            // channels open at once on the connection
};

enum class decode_step : std::uint8_t {
  need_input,  // the input is used up; a partial frame is kept for the next call
  control,     // control() is a complete control frame
  payload,     // header() is a buffer or event frame; deliver its payload before calling next()
  failed,      // error() names the fault; close the connection
};

// Reassembles frames from a byte stream split anywhere. Validates each header before it yields it.
// After a fault it stays failed: every later call returns the same error and consumes nothing.
class frame_decoder {
 public:
  // Throws std::invalid_argument when a bound is 0 or above its limit.
  explicit frame_decoder(frame_decoder_config config = {});
  frame_decoder(const frame_decoder&) = delete;
  frame_decoder& operator=(const frame_decoder&) = delete;
  frame_decoder(frame_decoder&&) noexcept = default;
  frame_decoder& operator=(frame_decoder&&) noexcept = default;

  // Registers a channel that this side receives data on, expecting sequence 0 next. Throws
  // std::invalid_argument for connection_channel_id or an open channel, and std::length_error when
  // max_channels are open.
  void add_channel(std::uint32_t channel_id);
  // Forgets a channel (the transport gave up on it); false when it was not open.
  bool remove_channel(std::uint32_t channel_id) noexcept;

  // Consumes bytes from the front of `input` until a frame (or its header) is complete or a fault is
  // found. In the payload state it returns decode_step::payload again and consumes nothing.
  decode_step next(std::span<const std::byte>& input);

  // The header of the frame that next() last yielded.
  const frame_header& header() const noexcept { return header_; }
  // The control frame that next() last yielded (decode_step::control).
  control_frame control() const noexcept;

  // Payload state. `payload` is the whole destination (at least header().payload_bytes); the bytes
  // go to its offset payload_received_bytes(). Copies what `input` holds of the payload, consumes
  // it, and returns the count. At the payload's end the decoder goes back to reading headers.
  std::size_t take_payload(std::span<const std::byte>& input, std::span<std::byte> payload) noexcept;
  // The caller received `bytes` of payload directly into its buffer (at most the remaining bytes).
  void payload_received(std::size_t bytes) noexcept;
  std::uint32_t payload_received_bytes() const noexcept { return payload_have_bytes_; }
  std::uint32_t payload_remaining_bytes() const noexcept;

  // The stream ended. Succeeds at a frame boundary. Fails with frame_fault::truncated mid-frame.
  io::result<void> finish();

  bool failed() const noexcept { return error_.has_value(); }
  const io::error& error() const noexcept;  // only when failed()
  frame_fault fault() const noexcept;       // only when failed()
  bool close_received() const noexcept { return state_ == state::closed; }
  std::uint64_t stream_offset_bytes() const noexcept { return stream_offset_bytes_; }
  const sequence_tracker& channels() const noexcept { return channels_; }
  const frame_decoder_config& config() const noexcept { return config_; }

 private:
  enum class state : std::uint8_t { header, control_payload, payload, closed, failed };

  decode_step fail(frame_fault fault, std::string message);
  // fail() with "malformed frame at stream byte N: " before `detail`; returns false.
  bool reject(frame_fault fault, std::string_view detail);
  bool check_header_prefix();
  bool accept_header();
  bool check_payload_length();
  bool check_addressing();
  decode_step finish_control();
  void consume(std::span<const std::byte>& input, std::size_t bytes) noexcept;

  frame_decoder_config config_;
  sequence_tracker channels_;
  state state_ = state::header;
  header_bytes header_buffer_{};
  std::size_t header_have_bytes_ = 0;
  frame_header header_;
  std::array<std::byte, max_close_reason_bytes> control_buffer_{};
  std::uint32_t payload_have_bytes_ = 0;
  std::uint64_t stream_offset_bytes_ = 0;
  std::uint64_t frame_offset_bytes_ = 0;  // where the current frame began in the stream
  std::optional<io::error> error_;
};

}  // namespace sluice::buffers
