// The wire frame codec (see frame.hpp for the format and the channel protocol).

#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/frame.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace sluice::buffers {

namespace {

void store_le(std::byte* p, std::uint64_t value, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(value >> (8 * i));
}
std::uint64_t load_le(const std::byte* p, std::size_t bytes) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = bytes; i-- > 0;) value = (value << 8) | static_cast<std::uint8_t>(p[i]);
  return value;
}
std::uint32_t load_le32(const std::byte* p) noexcept { return static_cast<std::uint32_t>(load_le(p, 4)); }

// Field offsets in the header.
constexpr std::size_t version_offset = 4;
constexpr std::size_t type_offset = 6;
constexpr std::size_t flags_offset = 7;
constexpr std::size_t channel_offset = 8;
constexpr std::size_t length_offset = 12;
constexpr std::size_t sequence_offset = 16;
constexpr std::size_t checksum_offset = 24;

constexpr std::uint32_t partition_request_bytes = 16;
constexpr std::uint32_t credit_bytes = 4;
constexpr std::uint32_t backlog_bytes = 4;

bool is_known_type(std::uint8_t raw) noexcept {
  return raw >= static_cast<std::uint8_t>(frame_type::partition_request) &&
         raw <= static_cast<std::uint8_t>(frame_type::close);
}

std::uint8_t allowed_flags(frame_type type) noexcept {
  return type == frame_type::event ? frame_flags::priority : std::uint8_t{0};
}

// The payload lengths a frame type allows; data frames are bounded by `data_max_bytes`.
struct length_rule {
  std::uint32_t min_bytes;
  std::uint32_t max_bytes;
};
length_rule payload_rule(frame_type type, std::uint32_t data_max_bytes) noexcept {
  switch (type) {
    case frame_type::partition_request:
      return {partition_request_bytes, partition_request_bytes};
    case frame_type::buffer:
    case frame_type::event:
      return {1, data_max_bytes};
    case frame_type::add_credit:
      return {credit_bytes, credit_bytes};
    case frame_type::backlog:
      return {backlog_bytes, backlog_bytes};
    case frame_type::cancel:
      return {0, 0};
    case frame_type::close:
      return {0, max_close_reason_bytes};
  }
  return {0, 0};
}

// "1 byte", "28 bytes".
std::string count_bytes(std::uint64_t n) { return fmt::format("{} byte{}", n, n == 1 ? "" : "s"); }

// "53 4c 43 45 ("SLCE")"; the quoted form only when all four bytes are printable.
std::string describe_magic(const std::byte* p) {
  std::string text = fmt::format("{:02x} {:02x} {:02x} {:02x}", static_cast<unsigned>(p[0]),
                                 static_cast<unsigned>(p[1]), static_cast<unsigned>(p[2]), static_cast<unsigned>(p[3]));
  if (std::all_of(p, p + 4, [](std::byte b) { return b >= std::byte{0x20} && b < std::byte{0x7f}; })) {
    text += " (\"";
    for (int i = 0; i < 4; ++i) text += static_cast<char>(p[i]);
    text += "\")";
  }
  return text;
}

encoded_frame encode_control(const frame_header& header, std::span<const std::byte> payload) noexcept {
  assert(header.payload_bytes == payload.size());
  encoded_frame frame;
  header_bytes out;
  encode_header(header, out);
  std::memcpy(frame.storage.data(), out.data(), out.size());
  if (!payload.empty()) std::memcpy(frame.storage.data() + frame_header_bytes, payload.data(), payload.size());
  frame.size_bytes = frame_header_bytes + payload.size();
  return frame;
}

class frame_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "sluice.frame"; }
  std::string message(int value) const override {
    if (value < 1 || value > frame_fault_count) return "unknown frame fault";
    return std::string(to_string(static_cast<frame_fault>(value)));
  }
};

}  // namespace

std::string_view to_string(frame_type type) noexcept {
  switch (type) {
    case frame_type::partition_request:
      return "partition-request";
    case frame_type::buffer:
      return "buffer";
    case frame_type::event:
      return "event";
    case frame_type::add_credit:
      return "add-credit";
    case frame_type::backlog:
      return "backlog";
    case frame_type::cancel:
      return "cancel";
    case frame_type::close:
      return "close";
  }
  return "unknown";
}

std::string_view to_string(frame_fault fault) noexcept {
  switch (fault) {
    case frame_fault::bad_magic:
      return "bad magic";
    case frame_fault::unsupported_version:
      return "unsupported version";
    case frame_fault::header_checksum_mismatch:
      return "header checksum mismatch";
    case frame_fault::unknown_type:
      return "unknown frame type";
    case frame_fault::unknown_flags:
      return "unknown flags";
    case frame_fault::oversized_payload:
      return "oversized payload";
    case frame_fault::invalid_payload_length:
      return "payload length invalid for the frame type";
    case frame_fault::invalid_payload:
      return "invalid payload";
    case frame_fault::unknown_channel:
      return "frame for an unknown channel";
    case frame_fault::channel_already_open:
      return "channel already open";
    case frame_fault::too_many_channels:
      return "too many channels";
    case frame_fault::wrong_direction:
      return "frame type not valid in this direction";
    case frame_fault::out_of_sequence:
      return "out-of-sequence frame";
    case frame_fault::data_after_close:
      return "data after close";
    case frame_fault::truncated:
      return "peer disconnected mid-frame";
  }
  return "unknown frame fault";
}

const std::error_category& frame_category() noexcept {
  static const frame_category_impl instance;
  return instance;
}

// ---- encoding ---------------------------------------------------------------------------------

void encode_header(const frame_header& header, header_bytes& out) noexcept {
  [[maybe_unused]] const length_rule rule = payload_rule(header.type, max_payload_limit_bytes);
  assert(is_known_type(static_cast<std::uint8_t>(header.type)));
  assert(header.payload_bytes >= rule.min_bytes && header.payload_bytes <= rule.max_bytes);
  assert((header.flags & ~allowed_flags(header.type)) == 0);
  assert(header.type == frame_type::close ? header.channel_id == connection_channel_id && header.sequence == 0
                                          : header.channel_id != connection_channel_id);

  std::memcpy(out.data(), frame_magic.data(), frame_magic.size());
  store_le(out.data() + version_offset, frame_version, 2);
  out[type_offset] = static_cast<std::byte>(header.type);
  out[flags_offset] = static_cast<std::byte>(header.flags);
  store_le(out.data() + channel_offset, header.channel_id, 4);
  store_le(out.data() + length_offset, header.payload_bytes, 4);
  store_le(out.data() + sequence_offset, header.sequence, 8);
  store_le(out.data() + checksum_offset, crc32c(std::span(out).first(checksum_offset)), 4);
}

encoded_frame encode_partition_request(std::uint32_t channel_id, std::uint64_t sequence,
                                       const partition_request& request) noexcept {
  std::array<std::byte, partition_request_bytes> payload;
  store_le(payload.data(), request.partition_id, 8);
  store_le(payload.data() + 8, request.subpartition_index, 4);
  store_le(payload.data() + 12, request.initial_credits, 4);
  return encode_control({frame_type::partition_request, 0, channel_id, sequence, partition_request_bytes}, payload);
}

encoded_frame encode_add_credit(std::uint32_t channel_id, std::uint64_t sequence, add_credit credit) noexcept {
  assert(credit.credits >= 1 && "an add-credit frame grants at least one credit");
  std::array<std::byte, credit_bytes> payload;
  store_le(payload.data(), credit.credits, 4);
  return encode_control({frame_type::add_credit, 0, channel_id, sequence, credit_bytes}, payload);
}

encoded_frame encode_backlog(std::uint32_t channel_id, std::uint64_t sequence, backlog_announcement backlog) noexcept {
  std::array<std::byte, backlog_bytes> payload;
  store_le(payload.data(), backlog.backlog_buffers, 4);
  return encode_control({frame_type::backlog, 0, channel_id, sequence, backlog_bytes}, payload);
}

encoded_frame encode_cancel(std::uint32_t channel_id, std::uint64_t sequence) noexcept {
  return encode_control({frame_type::cancel, 0, channel_id, sequence, 0}, {});
}

encoded_frame encode_close(std::string_view reason) noexcept {
  std::size_t size_bytes = std::min<std::size_t>(reason.size(), max_close_reason_bytes);
  // Never cut a UTF-8 character in two: back off while the first byte left out continues one.
  while (size_bytes > 0 && size_bytes < reason.size() &&
         (static_cast<unsigned char>(reason[size_bytes]) & 0xC0u) == 0x80u) {
    --size_bytes;
  }
  const auto payload = std::as_bytes(std::span(reason.data(), size_bytes));
  return encode_control({frame_type::close, 0, connection_channel_id, 0, static_cast<std::uint32_t>(size_bytes)},
                        payload);
}

// ---- frame_decoder ---------------------------------------------------------------------------

namespace {
const frame_decoder_config& validated(const frame_decoder_config& config) {
  if (config.max_payload_bytes < 1 || config.max_payload_bytes > max_payload_limit_bytes) {
    throw std::invalid_argument(fmt::format("frame decoder: max_payload_bytes is {}; it must be 1..{}",
                                            config.max_payload_bytes, max_payload_limit_bytes));
  }
  if (config.max_channels < 1 || config.max_channels > max_channels_limit) {
    throw std::invalid_argument(
        fmt::format("frame decoder: max_channels is {}; it must be 1..{}", config.max_channels, max_channels_limit));
  }
  return config;
}
}  // namespace

frame_decoder::frame_decoder(frame_decoder_config config)
    : config_(validated(config)), channels_(config.max_channels) {}

void frame_decoder::add_channel(std::uint32_t channel_id) {
  if (channel_id == connection_channel_id) {
    throw std::invalid_argument(
        fmt::format("frame decoder: channel id {:#x} is reserved for the connection", channel_id));
  }
  if (channels_.find(channel_id) != nullptr) {
    throw std::invalid_argument(fmt::format("frame decoder: channel {} is already open", channel_id));
  }
  if (!channels_.insert(channel_id, channel_role::receives_data)) {
    throw std::length_error(fmt::format("frame decoder: cannot add channel {}: all {} channels are open", channel_id,
                                        channels_.max_channels()));
  }
}

bool frame_decoder::remove_channel(std::uint32_t channel_id) noexcept { return channels_.erase(channel_id); }

void frame_decoder::consume(std::span<const std::byte>& input, std::size_t bytes) noexcept {
  input = input.subspan(bytes);
  stream_offset_bytes_ += bytes;
}

decode_step frame_decoder::fail(frame_fault fault, std::string message) {
  error_.emplace(make_error_code(fault), std::move(message));
  state_ = state::failed;
  return decode_step::failed;
}

bool frame_decoder::reject(frame_fault fault, std::string_view detail) {
  fail(fault, fmt::format("malformed frame at stream byte {}: {}", frame_offset_bytes_, detail));
  return false;
}

decode_step frame_decoder::next(std::span<const std::byte>& input) {
  switch (state_) {
    case state::failed:
      return decode_step::failed;
    case state::payload:
      return decode_step::payload;
    case state::closed:
      if (input.empty()) return decode_step::need_input;
      return fail(frame_fault::data_after_close,
                  fmt::format("data after the close frame, from stream byte {}", stream_offset_bytes_));
    case state::header:
    case state::control_payload:
      break;
  }
  // Each pass consumes at least one byte, so the loop is bounded by input.size().
  while (!input.empty()) {
    if (state_ == state::header) {
      if (header_have_bytes_ == 0) frame_offset_bytes_ = stream_offset_bytes_;
      const std::size_t n = std::min(input.size(), frame_header_bytes - header_have_bytes_);
      std::memcpy(header_buffer_.data() + header_have_bytes_, input.data(), n);
      header_have_bytes_ += n;
      consume(input, n);
      if (!check_header_prefix()) return decode_step::failed;
      if (header_have_bytes_ < frame_header_bytes) continue;
      if (!accept_header()) return decode_step::failed;
      header_have_bytes_ = 0;
      payload_have_bytes_ = 0;
      if (is_data_frame(header_.type)) {
        state_ = state::payload;
        return decode_step::payload;
      }
      if (header_.payload_bytes == 0) return finish_control();
      state_ = state::control_payload;
    } else {
      const std::size_t n = std::min<std::size_t>(input.size(), header_.payload_bytes - payload_have_bytes_);
      std::memcpy(control_buffer_.data() + payload_have_bytes_, input.data(), n);
      payload_have_bytes_ += static_cast<std::uint32_t>(n);
      consume(input, n);
      if (payload_have_bytes_ == header_.payload_bytes) return finish_control();
    }
  }
  return decode_step::need_input;
}

// Magic and version are checked as soon as their bytes arrive, so a peer speaking another protocol
// is turned away without waiting for a whole header.
bool frame_decoder::check_header_prefix() {
  const std::byte* b = header_buffer_.data();
  if (header_have_bytes_ >= frame_magic.size() && std::memcmp(b, frame_magic.data(), frame_magic.size()) != 0) {
    return reject(frame_fault::bad_magic,
                  fmt::format("bad magic {}, expected {}", describe_magic(b), describe_magic(frame_magic.data())));
  }
  if (header_have_bytes_ >= version_offset + 2) {
    const auto version = static_cast<std::uint16_t>(load_le(b + version_offset, 2));
    if (version != frame_version) {
      return reject(frame_fault::unsupported_version,
                    fmt::format("unsupported version {} (this side speaks version {})", version, frame_version));
    }
  }
  return true;
}

bool frame_decoder::accept_header() {
  const std::byte* b = header_buffer_.data();
  const std::uint32_t stored_crc = load_le32(b + checksum_offset);
  const std::uint32_t computed_crc = crc32c(std::span(header_buffer_).first(checksum_offset));
  if (stored_crc != computed_crc) {
    return reject(frame_fault::header_checksum_mismatch,
                  fmt::format("header checksum {:#010x} does not match {:#010x}, computed over header bytes 0..23",
                              stored_crc, computed_crc));
  }
  const auto raw_type = static_cast<std::uint8_t>(b[type_offset]);
  if (!is_known_type(raw_type)) {
    return reject(frame_fault::unknown_type, fmt::format("unknown frame type {:#04x}", raw_type));
  }
  header_ = frame_header{
      .type = static_cast<frame_type>(raw_type),
      .flags = static_cast<std::uint8_t>(b[flags_offset]),
      .channel_id = load_le32(b + channel_offset),
      .sequence = load_le(b + sequence_offset, 8),
      .payload_bytes = load_le32(b + length_offset),
  };
  const std::uint8_t allowed = allowed_flags(header_.type);
  if ((header_.flags & ~allowed) != 0) {
    return reject(frame_fault::unknown_flags, fmt::format("{} frame with flags {:#04x} (allowed: {:#04x})",
                                                          to_string(header_.type), header_.flags, allowed));
  }
  return check_payload_length() && check_addressing();
}

bool frame_decoder::check_payload_length() {
  const length_rule rule = payload_rule(header_.type, config_.max_payload_bytes);
  const std::uint32_t length = header_.payload_bytes;
  if (is_data_frame(header_.type) && length > rule.max_bytes) {
    return reject(frame_fault::oversized_payload,
                  fmt::format("{} frame on channel {} with a payload of {} bytes exceeds the limit of {} bytes",
                              to_string(header_.type), header_.channel_id, length, rule.max_bytes));
  }
  if (length < rule.min_bytes || length > rule.max_bytes) {
    const std::string allowed = rule.min_bytes == rule.max_bytes
                                    ? "exactly " + count_bytes(rule.min_bytes)
                                    : fmt::format("{}..{} bytes", rule.min_bytes, rule.max_bytes);
    return reject(frame_fault::invalid_payload_length,
                  fmt::format("{} frame with a payload of {}; {} frames carry {}", to_string(header_.type),
                              count_bytes(length), to_string(header_.type), allowed));
  }
  return true;
}

// Channel, direction and sequence. The tracker changes only once every check has passed.
bool frame_decoder::check_addressing() {
  const std::string_view type_name = to_string(header_.type);
  const std::uint32_t channel = header_.channel_id;
  const auto out_of_sequence = [&](std::uint64_t expected) {
    return reject(frame_fault::out_of_sequence,
                  fmt::format("out-of-sequence {} frame on channel {}: expected sequence {}, got {}", type_name,
                              channel, expected, header_.sequence));
  };

  if (header_.type == frame_type::close) {
    if (channel != connection_channel_id) {
      return reject(frame_fault::unknown_channel,
                    fmt::format("close frame for channel {}; a close frame addresses the connection (channel {:#x})",
                                channel, connection_channel_id));
    }
    return header_.sequence == 0 || out_of_sequence(0);
  }
  if (channel == connection_channel_id) {
    return reject(frame_fault::unknown_channel,
                  fmt::format("{} frame for channel {:#x}, which is reserved for the connection", type_name, channel));
  }

  if (header_.type == frame_type::partition_request) {
    if (const auto* open = channels_.find(channel)) {
      return reject(frame_fault::channel_already_open,
                    fmt::format("partition request for channel {}, which is already open (next sequence {})", channel,
                                open->next_sequence));
    }
    if (channels_.size() == channels_.max_channels()) {
      return reject(frame_fault::too_many_channels,
                    fmt::format("partition request for channel {} exceeds the limit of {} open channels", channel,
                                channels_.max_channels()));
    }
    if (header_.sequence != 0) return out_of_sequence(0);
    [[maybe_unused]] const bool inserted = channels_.insert(channel, channel_role::sends_data);
    assert(inserted);
    channels_.find(channel)->next_sequence = 1;
    return true;
  }

  auto* open = channels_.find(channel);
  if (open == nullptr) {
    return reject(frame_fault::unknown_channel, fmt::format("{} frame for unknown channel {} ({} channels open)",
                                                            type_name, channel, channels_.size()));
  }
  const bool receiver_to_sender = header_.type == frame_type::add_credit;
  const bool direction_ok = header_.type == frame_type::cancel ||
                            open->role == (receiver_to_sender ? channel_role::sends_data : channel_role::receives_data);
  if (!direction_ok) {
    return reject(
        frame_fault::wrong_direction,
        fmt::format("{} frame on channel {}, on which this side {} data; {} frames flow from a channel's data {}",
                    type_name, channel, open->role == channel_role::receives_data ? "receives" : "sends", type_name,
                    receiver_to_sender ? "receiver to its sender" : "sender to its receiver"));
  }
  if (header_.sequence != open->next_sequence) return out_of_sequence(open->next_sequence);
  if (header_.type == frame_type::cancel) {
    channels_.erase(channel);  // the peer sends nothing more on it
  } else {
    ++open->next_sequence;
  }
  return true;
}

decode_step frame_decoder::finish_control() {
  if (header_.type == frame_type::add_credit && load_le32(control_buffer_.data()) == 0) {
    reject(frame_fault::invalid_payload,
           fmt::format("add-credit of 0 credits on channel {}; it must grant at least 1", header_.channel_id));
    return decode_step::failed;
  }
  state_ = header_.type == frame_type::close ? state::closed : state::header;
  return decode_step::control;
}

control_frame frame_decoder::control() const noexcept {
  const std::byte* p = control_buffer_.data();
  control_frame frame{header_, cancel_channel{}};
  switch (header_.type) {
    case frame_type::partition_request:
      frame.payload = partition_request{load_le(p, 8), load_le32(p + 8), load_le32(p + 12)};
      break;
    case frame_type::add_credit:
      frame.payload = add_credit{load_le32(p)};
      break;
    case frame_type::backlog:
      frame.payload = backlog_announcement{load_le32(p)};
      break;
    case frame_type::cancel:
      break;
    case frame_type::close:
      frame.payload = close_connection{{reinterpret_cast<const char*>(p), header_.payload_bytes}};
      break;
    case frame_type::buffer:
    case frame_type::event:
      assert(false && "control() after a data frame");
      break;
  }
  return frame;
}

std::size_t frame_decoder::take_payload(std::span<const std::byte>& input, std::span<std::byte> payload) noexcept {
  assert(state_ == state::payload && "take_payload() outside a data frame's payload");
  assert(payload.size() >= header_.payload_bytes && "the payload destination is smaller than the payload");
  const std::size_t n = std::min<std::size_t>(input.size(), payload_remaining_bytes());
  if (n > 0) std::memcpy(payload.data() + payload_have_bytes_, input.data(), n);
  input = input.subspan(n);
  payload_received(n);  // counts the bytes in stream_offset_bytes_
  return n;
}

void frame_decoder::payload_received(std::size_t bytes) noexcept {
  assert(state_ == state::payload && "payload_received() outside a data frame's payload");
  assert(bytes <= payload_remaining_bytes() && "more payload received than the frame carries");
  payload_have_bytes_ += static_cast<std::uint32_t>(bytes);
  stream_offset_bytes_ += bytes;
  if (payload_have_bytes_ == header_.payload_bytes) state_ = state::header;
}

std::uint32_t frame_decoder::payload_remaining_bytes() const noexcept {
  return state_ == state::payload ? header_.payload_bytes - payload_have_bytes_ : 0;
}

io::result<void> frame_decoder::finish() {
  if (failed()) return *error_;
  std::uint64_t have_bytes = 0;
  switch (state_) {
    case state::closed:
      return io::success();
    case state::header:
      if (header_have_bytes_ == 0) return io::success();
      fail(frame_fault::truncated,
           fmt::format("peer disconnected mid-frame after {} of {} bytes, in the header of the frame at stream byte {}",
                       header_have_bytes_, frame_header_bytes, frame_offset_bytes_));
      return *error_;
    case state::control_payload:
    case state::payload:
      have_bytes = frame_header_bytes + payload_have_bytes_;
      break;
    case state::failed:
      break;
  }
  fail(frame_fault::truncated, fmt::format("peer disconnected mid-frame after {} of {} bytes, in the payload of a {} "
                                           "frame on channel {} at stream byte {}",
                                           have_bytes, frame_header_bytes + header_.payload_bytes,
                                           to_string(header_.type), header_.channel_id, frame_offset_bytes_));
  return *error_;
}

const io::error& frame_decoder::error() const noexcept {
  assert(failed() && "frame_decoder::error() without a fault");
  return *error_;
}

frame_fault frame_decoder::fault() const noexcept {
  assert(failed() && "frame_decoder::fault() without a fault");
  return static_cast<frame_fault>(error_->code().value());
}

}  // namespace sluice::buffers
