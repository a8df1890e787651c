#pragma once
// frame_support: for the frame codec's tests (frame_test, frame_faults_test): raw headers written
// field by field, streams of frames, and a decoder driven over a stream in chosen pieces.

#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/frame.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace sluice::test::frames {

using namespace sluice::buffers;


using bytes = std::vector<std::byte>;

inline std::span<const std::byte> as_span(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

inline void put_le(bytes& out, std::uint64_t value, std::size_t size_bytes) {
  for (std::size_t i = 0; i < size_bytes; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}

// A header laid out by hand, independently of encode_header, so that a test can build any header,
// valid or not. The checksum is computed over bytes 0..23 unless `checksum` is given.
struct raw_header {
  std::string magic = "SLCE";
  std::uint16_t version = 1;
  std::uint8_t type = static_cast<std::uint8_t>(frame_type::buffer);
  std::uint8_t flags = 0;
  std::uint32_t channel_id = 1;
  std::uint32_t payload_bytes = 0;
  std::uint64_t sequence = 0;
  std::optional<std::uint32_t> checksum;

  bytes encode() const {
    bytes out;
    for (char c : magic) out.push_back(static_cast<std::byte>(c));
    put_le(out, version, 2);
    put_le(out, type, 1);
    put_le(out, flags, 1);
    put_le(out, channel_id, 4);
    put_le(out, payload_bytes, 4);
    put_le(out, sequence, 8);
    put_le(out, checksum.value_or(crc32c(out)), 4);
    return out;
  }
};

inline bytes filler(std::size_t size_bytes, std::uint8_t seed) {
  bytes out(size_bytes);
  for (std::size_t i = 0; i < size_bytes; ++i) out[i] = static_cast<std::byte>(seed + i * 7);
  return out;
}

// A stream of frames as one peer sends them, with sequence numbers counted per channel.
struct stream_builder {
  bytes stream;
  std::vector<std::size_t> frame_offsets;
  std::map<std::uint32_t, std::uint64_t> next_sequence;

  void append(std::span<const std::byte> frame) {
    frame_offsets.push_back(stream.size());
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  void data(frame_type type, std::uint32_t channel, const bytes& payload, std::uint8_t flags = 0) {
    header_bytes header;
    encode_header({type, flags, channel, next_sequence[channel]++, static_cast<std::uint32_t>(payload.size())}, header);
    append(header);
    stream.insert(stream.end(), payload.begin(), payload.end());
  }
  void request(std::uint32_t channel, partition_request r) {
    append(encode_partition_request(channel, next_sequence[channel]++, r).bytes());
  }
  void credit(std::uint32_t channel, std::uint32_t credits) {
    append(encode_add_credit(channel, next_sequence[channel]++, {credits}).bytes());
  }
  void backlog(std::uint32_t channel, std::uint32_t buffers) {
    append(encode_backlog(channel, next_sequence[channel]++, {buffers}).bytes());
  }
  void cancel(std::uint32_t channel) { append(encode_cancel(channel, next_sequence[channel]++).bytes()); }
  void close(std::string_view reason) { append(encode_close(reason).bytes()); }
};

// One decoded frame, owning its bytes, so that decodes of one stream can be compared.
struct decoded_frame {
  frame_header header;
  bytes payload;                           // data frames
  std::optional<control_payload> control;  // control frames; a close reason is in close_reason
  std::string close_reason;
  friend bool operator==(const decoded_frame&, const decoded_frame&) = default;
};

struct outcome {
  std::vector<decoded_frame> frames;
  std::optional<sluice::io::error> error;
};

// Feeds `stream` in chunks whose sizes come from `next_chunk_bytes`, the way a transport would:
// control frames are collected, data payloads are copied straight into a per-frame buffer.
inline outcome decode(frame_decoder& decoder, std::span<const std::byte> stream,
               const std::function<std::size_t()>& next_chunk_bytes) {
  outcome out;
  std::size_t position = 0;
  while (position < stream.size() && !decoder.failed()) {
    const std::size_t chunk_bytes = std::min(std::max<std::size_t>(1, next_chunk_bytes()), stream.size() - position);
    std::span<const std::byte> chunk = stream.subspan(position, chunk_bytes);
    position += chunk_bytes;
    // Every step consumes input or yields a frame, so 2 passes per byte bound the loop.
    for (std::size_t pass = 0; pass <= 2 * chunk_bytes + 2; ++pass) {
      if (decoder.payload_remaining_bytes() > 0) {
        decoder.take_payload(chunk, out.frames.back().payload);
        if (decoder.payload_remaining_bytes() > 0) break;
      }
      const decode_step step = decoder.next(chunk);
      if (step == decode_step::need_input || step == decode_step::failed) break;
      decoded_frame frame{decoder.header(), {}, {}, {}};
      if (step == decode_step::control) {
        control_payload payload = decoder.control().payload;
        if (auto* close = std::get_if<close_connection>(&payload)) {
          frame.close_reason = std::string(close->reason);
          close->reason = {};
        }
        frame.control = payload;
      } else {
        frame.payload.resize(decoder.header().payload_bytes);
      }
      out.frames.push_back(std::move(frame));
    }
  }
  if (auto finished = decoder.finish(); !finished) out.error = finished.error();
  return out;
}

inline outcome decode_whole(frame_decoder& decoder, std::span<const std::byte> stream) {
  return decode(decoder, stream, [&] { return stream.size(); });
}

inline constexpr frame_decoder_config test_config{.max_payload_bytes = 1024, .max_channels = 8};

// The decoder of a side that receives data on channels 1 and 3 (the peer may open others).
inline frame_decoder receiver_decoder(frame_decoder_config config = test_config) {
  frame_decoder decoder(config);
  decoder.add_channel(1);
  decoder.add_channel(3);
  return decoder;
}

// A mixed stream: data on channels 1 and 3, a channel 4 that the peer opens and ends, then close.
inline stream_builder mixed_stream() {
  stream_builder b;
  b.request(4, {.partition_id = 0x1122334455667788, .subpartition_index = 5, .initial_credits = 2});
  b.data(frame_type::buffer, 1, filler(100, 1));
  b.backlog(1, 7);
  b.data(frame_type::buffer, 3, filler(1024, 2));
  b.credit(4, 3);
  b.data(frame_type::event, 1, filler(9, 3), frame_flags::priority);
  b.data(frame_type::buffer, 1, filler(1, 4));
  b.data(frame_type::event, 3, filler(17, 5));
  b.credit(4, 1);
  b.cancel(4);
  b.data(frame_type::buffer, 3, filler(333, 6));
  b.close("job finished");
  return b;
}


}  // namespace sluice::test::frames
