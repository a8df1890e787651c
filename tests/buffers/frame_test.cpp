// The wire frame codec: layout, round trips, reassembly from any split, and a named fault for every
// kind of malformed input (docs/design.md invariant 9, scenario 22). Also CRC32C, which the header uses.

#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/frame.hpp>

#include <catch2/catch.hpp>

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

using namespace sluice::buffers;

namespace {

using bytes = std::vector<std::byte>;

std::span<const std::byte> as_span(std::string_view text) { return std::as_bytes(std::span(text.data(), text.size())); }

void put_le(bytes& out, std::uint64_t value, std::size_t size_bytes) {
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

bytes filler(std::size_t size_bytes, std::uint8_t seed) {
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
outcome decode(frame_decoder& decoder, std::span<const std::byte> stream,
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

outcome decode_whole(frame_decoder& decoder, std::span<const std::byte> stream) {
  return decode(decoder, stream, [&] { return stream.size(); });
}

constexpr frame_decoder_config test_config{.max_payload_bytes = 1024, .max_channels = 8};

// The decoder of a side that receives data on channels 1 and 3 (the peer may open others).
frame_decoder receiver_decoder(frame_decoder_config config = test_config) {
  frame_decoder decoder(config);
  decoder.add_channel(1);
  decoder.add_channel(3);
  return decoder;
}

// A mixed stream: data on channels 1 and 3, a channel 4 that the peer opens and ends, then close.
stream_builder mixed_stream() {
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

}  // namespace

// ---- CRC32C ---------------------------------------------------------------------------------

TEST_CASE("crc32c of \"123456789\" is the standard check value 0xE3069283", "[crc32c]") {
  CHECK(crc32c(as_span("123456789")) == 0xE3069283u);
  CHECK(detail::crc32c_extend_software(0, as_span("123456789")) == 0xE3069283u);
  CHECK(crc32c({}) == 0u);
}

TEST_CASE("crc32c matches the RFC 3720 test vectors", "[crc32c]") {
  bytes zeros(32, std::byte{0x00}), ones(32, std::byte{0xFF}), up(32), down(32);
  for (std::size_t i = 0; i < 32; ++i) {
    up[i] = static_cast<std::byte>(i);
    down[i] = static_cast<std::byte>(31 - i);
  }
  CHECK(crc32c(zeros) == 0x8A9136AAu);
  CHECK(crc32c(ones) == 0x62A8AB43u);
  CHECK(crc32c(up) == 0x46DD794Eu);
  CHECK(crc32c(down) == 0x113FDB5Cu);
}

TEST_CASE("crc32c extended piece by piece equals crc32c of the whole", "[crc32c]") {
  const std::string_view text = "The quick brown fox jumps over the lazy dog, then again and again.";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    const std::uint32_t first = crc32c(as_span(text.substr(0, cut)));
    REQUIRE(crc32c_extend(first, as_span(text.substr(cut))) == crc32c(as_span(text)));
  }
}

TEST_CASE("crc32c in hardware and in software agree at every length and alignment", "[crc32c]") {
  if (!crc32c_uses_hardware()) SUCCEED("no SSE4.2 on this CPU: only the software path runs");
  std::mt19937 random(20240607);
  bytes data(1100);
  for (auto& b : data) b = static_cast<std::byte>(random());
  for (std::size_t offset = 0; offset < 9; ++offset) {
    for (std::size_t size_bytes = 0; size_bytes + offset <= data.size(); size_bytes += 1 + size_bytes / 8) {
      const auto piece = std::span(data).subspan(offset, size_bytes);
      const std::uint32_t software = detail::crc32c_extend_software(0x12345678u, piece);
      REQUIRE(crc32c_extend(0x12345678u, piece) == software);
      if (crc32c_uses_hardware()) REQUIRE(detail::crc32c_extend_hardware(0x12345678u, piece) == software);
    }
  }
}

// ---- encoding -------------------------------------------------------------------------------

TEST_CASE("an encoded header has the documented layout, byte for byte", "[frame]") {
  header_bytes encoded;
  encode_header({frame_type::event, frame_flags::priority, 0x01020304, 0x1112131415161718, 0x03222324}, encoded);
  const bytes expected = raw_header{.type = 3,
                                    .flags = 0x01,
                                    .channel_id = 0x01020304,
                                    .payload_bytes = 0x03222324,
                                    .sequence = 0x1112131415161718}
                             .encode();
  CHECK(bytes(encoded.begin(), encoded.end()) == expected);
  CHECK(expected.size() == frame_header_bytes);
}

TEST_CASE("a close reason longer than the limit is cut at a UTF-8 character boundary", "[frame]") {
  std::string reason(max_close_reason_bytes - 1, 'a');  // (appended, not concatenated: GCC 12's false
  reason += "\xC3\xA9";                                  // -Warray-bounds at -O1) 257 bytes, ends in é
  const encoded_frame frame = encode_close(reason);
  CHECK(frame.size_bytes == frame_header_bytes + max_close_reason_bytes - 1);
  CHECK(encode_close(std::string(300, 'b')).size_bytes == max_control_frame_bytes);
}

// ---- decoding -------------------------------------------------------------------------------

TEST_CASE("every frame type survives a round trip with all its fields", "[frame]") {
  const stream_builder b = mixed_stream();
  frame_decoder decoder = receiver_decoder();
  const outcome got = decode_whole(decoder, b.stream);
  REQUIRE_FALSE(got.error);
  REQUIRE(got.frames.size() == 12);

  const auto& request = got.frames[0];
  CHECK(request.header == frame_header{frame_type::partition_request, 0, 4, 0, 16});
  CHECK(std::get<partition_request>(*request.control) ==
        partition_request{.partition_id = 0x1122334455667788, .subpartition_index = 5, .initial_credits = 2});

  CHECK(got.frames[1].header == frame_header{frame_type::buffer, 0, 1, 0, 100});
  CHECK(got.frames[1].payload == filler(100, 1));
  CHECK(std::get<backlog_announcement>(*got.frames[2].control).backlog_buffers == 7);
  CHECK(got.frames[2].header.sequence == 1);
  CHECK(got.frames[3].payload == filler(1024, 2));
  CHECK(std::get<add_credit>(*got.frames[4].control).credits == 3);
  CHECK(got.frames[4].header == frame_header{frame_type::add_credit, 0, 4, 1, 4});
  CHECK(got.frames[5].header == frame_header{frame_type::event, frame_flags::priority, 1, 2, 9});
  CHECK(got.frames[5].payload == filler(9, 3));
  CHECK(got.frames[6].payload == filler(1, 4));
  CHECK(got.frames[7].header == frame_header{frame_type::event, 0, 3, 1, 17});
  CHECK(std::holds_alternative<cancel_channel>(*got.frames[9].control));
  CHECK(got.frames[9].header == frame_header{frame_type::cancel, 0, 4, 3, 0});
  CHECK(got.frames[10].header == frame_header{frame_type::buffer, 0, 3, 2, 333});
  CHECK(got.frames[11].header == frame_header{frame_type::close, 0, connection_channel_id, 0, 12});
  CHECK(got.frames[11].close_reason == "job finished");

  CHECK(decoder.close_received());
  CHECK(decoder.stream_offset_bytes() == b.stream.size());
  CHECK(decoder.channels().find(4) == nullptr);  // the cancel ended channel 4
  CHECK(decoder.channels().size() == 2);
}

TEST_CASE("a stream fed 1 byte at a time or in random-sized chunks decodes as it does whole", "[frame]") {
  const stream_builder b = mixed_stream();
  frame_decoder whole_decoder = receiver_decoder();
  const outcome whole = decode_whole(whole_decoder, b.stream);
  REQUIRE_FALSE(whole.error);

  frame_decoder bytewise_decoder = receiver_decoder();
  const outcome bytewise = decode(bytewise_decoder, b.stream, [] { return 1; });
  CHECK_FALSE(bytewise.error);
  CHECK(bytewise.frames == whole.frames);

  for (std::uint32_t seed = 1; seed <= 50; ++seed) {
    std::mt19937 random(seed);
    std::uniform_int_distribution<std::size_t> chunk_bytes(1, 80);
    frame_decoder decoder = receiver_decoder();
    const outcome chunked = decode(decoder, b.stream, [&] { return chunk_bytes(random); });
    INFO("seed " << seed);
    REQUIRE_FALSE(chunked.error);
    REQUIRE(chunked.frames == whole.frames);
  }
}

TEST_CASE("several frames in one chunk come out one per call, in order", "[frame]") {
  stream_builder b;
  b.backlog(1, 1);
  b.backlog(1, 2);
  b.data(frame_type::buffer, 1, filler(3, 9));
  b.backlog(1, 3);
  frame_decoder decoder = receiver_decoder();
  std::span<const std::byte> chunk = b.stream;

  REQUIRE(decoder.next(chunk) == decode_step::control);
  CHECK(std::get<backlog_announcement>(decoder.control().payload).backlog_buffers == 1);
  CHECK(chunk.size() == b.stream.size() - b.frame_offsets[1]);
  REQUIRE(decoder.next(chunk) == decode_step::control);
  CHECK(std::get<backlog_announcement>(decoder.control().payload).backlog_buffers == 2);
  REQUIRE(decoder.next(chunk) == decode_step::payload);
  CHECK(decoder.next(chunk) == decode_step::payload);  // nothing consumed until the payload is taken
  bytes payload(3);
  CHECK(decoder.take_payload(chunk, payload) == 3);
  CHECK(payload == filler(3, 9));
  REQUIRE(decoder.next(chunk) == decode_step::control);
  CHECK(std::get<backlog_announcement>(decoder.control().payload).backlog_buffers == 3);
  CHECK(chunk.empty());
  CHECK(decoder.next(chunk) == decode_step::need_input);
  CHECK(decoder.finish().ok());
}

TEST_CASE("a payload can be received directly into the caller's buffer", "[frame]") {
  stream_builder b;
  b.data(frame_type::buffer, 1, filler(1000, 11));
  b.backlog(1, 4);
  frame_decoder decoder = receiver_decoder();
  // The transport's first read holds the header and 72 payload bytes; it receives the rest itself.
  std::span<const std::byte> chunk = std::span(b.stream).first(100);
  REQUIRE(decoder.next(chunk) == decode_step::payload);
  bytes credited_buffer(1024);
  CHECK(decoder.take_payload(chunk, credited_buffer) == 72);
  CHECK(decoder.payload_received_bytes() == 72);
  CHECK(decoder.payload_remaining_bytes() == 928);
  std::memcpy(credited_buffer.data() + 72, b.stream.data() + 100, 928);  // the "recv"
  decoder.payload_received(928);
  CHECK(decoder.payload_remaining_bytes() == 0);
  CHECK(bytes(credited_buffer.begin(), credited_buffer.begin() + 1000) == filler(1000, 11));
  std::span<const std::byte> rest = std::span(b.stream).subspan(b.frame_offsets[1]);
  REQUIRE(decoder.next(rest) == decode_step::control);
  CHECK(decoder.control().header.sequence == 1);
  CHECK(decoder.stream_offset_bytes() == b.stream.size());
}

TEST_CASE("a payload of exactly max_payload_bytes is accepted", "[frame]") {
  stream_builder b;
  b.data(frame_type::buffer, 1, filler(test_config.max_payload_bytes, 12));
  b.data(frame_type::event, 3, filler(test_config.max_payload_bytes, 13));
  frame_decoder decoder = receiver_decoder();
  const outcome got = decode_whole(decoder, b.stream);
  REQUIRE_FALSE(got.error);
  REQUIRE(got.frames.size() == 2);
  CHECK(got.frames[0].payload == filler(test_config.max_payload_bytes, 12));
  CHECK(got.frames[1].payload == filler(test_config.max_payload_bytes, 13));
}

namespace {

struct malformed_case {
  std::string name;
  std::function<bytes()> stream;
  frame_fault fault;
  std::vector<std::string> message_parts;
};

bytes concat(std::initializer_list<bytes> parts) {
  bytes out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

bytes to_bytes(std::span<const std::byte> span) { return bytes(span.begin(), span.end()); }

bytes first_bytes(bytes whole, std::size_t size_bytes) {
  whole.resize(size_bytes);
  return whole;
}

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "%#010x", value);
  return text;
}

std::vector<malformed_case> malformed_cases() {
  const auto buffer_header = [](std::uint32_t channel, std::uint64_t sequence, std::uint32_t payload_bytes) {
    return raw_header{.channel_id = channel, .payload_bytes = payload_bytes, .sequence = sequence}.encode();
  };
  const auto flipped = [&] {
    bytes h = buffer_header(1, 0, 8);
    h[16] ^= std::byte{0x04};  // one bit of the sequence number
    return h;
  };
  const bytes flipped_header = flipped();
  std::uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<std::uint8_t>(flipped_header[24 + i]);
  const std::uint32_t computed = crc32c(std::span(flipped_header).first(24));

  std::vector<malformed_case> cases = {
      {"bad magic",
       [] { return raw_header{.magic = "XLCE"}.encode(); },
       frame_fault::bad_magic,
       {"stream byte 0", "bad magic 58 4c 43 45 (\"XLCE\")", "expected 53 4c 43 45 (\"SLCE\")"}},
      {"version 2",
       [] { return raw_header{.version = 2}.encode(); },
       frame_fault::unsupported_version,
       {"unsupported version 2", "speaks version 1"}},
      {"unknown type 0xEE",
       [] { return raw_header{.type = 0xEE}.encode(); },
       frame_fault::unknown_type,
       {"unknown frame type 0xee"}},
      {"payload length max+1",
       [=] { return buffer_header(1, 0, 1025); },
       frame_fault::oversized_payload,
       {"buffer frame on channel 1", "payload of 1025 bytes", "limit of 1024 bytes"}},
      {"add-credit with a 5-byte payload",
       [] { return raw_header{.type = 4, .payload_bytes = 5}.encode(); },
       frame_fault::invalid_payload_length,
       {"add-credit frame with a payload of 5 bytes", "add-credit frames carry exactly 4 bytes"}},
      {"header checksum with one flipped bit",
       flipped,
       frame_fault::header_checksum_mismatch,
       {"header checksum " + hex32(stored), "does not match " + hex32(computed)}},
      {"sequence 5 when 3 is expected",
       [=] {
         return concat({buffer_header(1, 0, 1), filler(1, 0), buffer_header(1, 1, 1), filler(1, 0),
                        buffer_header(1, 2, 1), filler(1, 0), buffer_header(1, 5, 1)});
       },
       frame_fault::out_of_sequence,
       {"stream byte 87", "buffer frame on channel 1", "expected sequence 3, got 5"}},
      {"unknown channel 42",
       [=] { return buffer_header(42, 0, 10); },
       frame_fault::unknown_channel,
       {"buffer frame for unknown channel 42", "2 channels open"}},
      {"disconnect mid-header",
       [=] { return first_bytes(buffer_header(1, 0, 10), 10); },
       frame_fault::truncated,
       {"peer disconnected mid-frame after 10 of 28 bytes", "in the header"}},
      {"disconnect mid-payload",
       [=] {
         return concat({buffer_header(1, 0, 1000), filler(100, 0)});
       },
       frame_fault::truncated,
       {"peer disconnected mid-frame after 128 of 1028 bytes", "buffer frame on channel 1"}},
      {"disconnect mid-control-payload",
       [] { return first_bytes(to_bytes(encode_backlog(1, 0, {5}).bytes()), 30); },
       frame_fault::truncated,
       {"after 30 of 32 bytes", "backlog frame on channel 1"}},
      {"priority flag on a buffer frame",
       [] { return raw_header{.flags = 0x01, .payload_bytes = 1}.encode(); },
       frame_fault::unknown_flags,
       {"buffer frame with flags 0x01 (allowed: 0x00)"}},
      {"reserved flag on an event frame",
       [] { return raw_header{.type = 3, .flags = 0x81, .payload_bytes = 1}.encode(); },
       frame_fault::unknown_flags,
       {"event frame with flags 0x81 (allowed: 0x01)"}},
      {"empty buffer frame",
       [=] { return buffer_header(1, 0, 0); },
       frame_fault::invalid_payload_length,
       {"buffer frame with a payload of 0 bytes", "buffer frames carry 1..1024 bytes"}},
      {"close reason over 256 bytes",
       [] { return raw_header{.type = 7, .channel_id = connection_channel_id, .payload_bytes = 257}.encode(); },
       frame_fault::invalid_payload_length,
       {"close frame with a payload of 257 bytes", "0..256 bytes"}},
      {"add-credit of 0 credits",
       [] {
         return concat({to_bytes(encode_partition_request(6, 0, {}).bytes()),
                        raw_header{.type = 4, .channel_id = 6, .payload_bytes = 4, .sequence = 1}.encode(), bytes(4)});
       },
       frame_fault::invalid_payload,
       {"add-credit of 0 credits on channel 6"}},
      {"partition request for an open channel",
       [] { return to_bytes(encode_partition_request(3, 0, {}).bytes()); },
       frame_fault::channel_already_open,
       {"partition request for channel 3, which is already open"}},
      {"add-credit on a channel this side receives on",
       [] { return to_bytes(encode_add_credit(1, 0, {2}).bytes()); },
       frame_fault::wrong_direction,
       {"add-credit frame on channel 1, on which this side receives data"}},
      {"buffer on a channel this side sends on",
       [=] {
         return concat({to_bytes(encode_partition_request(6, 0, {}).bytes()), buffer_header(6, 1, 4), filler(4, 0)});
       },
       frame_fault::wrong_direction,
       {"buffer frame on channel 6, on which this side sends data"}},
      {"partition requests beyond max_channels",
       [] {
         bytes out;
         for (std::uint32_t channel = 10; channel < 17; ++channel) {
           out = concat({out, to_bytes(encode_partition_request(channel, 0, {}).bytes())});
         }
         return out;
       },
       frame_fault::too_many_channels,
       {"partition request for channel 16", "limit of 8 open channels"}},
      {"partition request with sequence 1",
       [] { return to_bytes(encode_partition_request(6, 1, {}).bytes()); },
       frame_fault::out_of_sequence,
       {"partition-request frame on channel 6: expected sequence 0, got 1"}},
      {"close addressed to a channel",
       [] { return raw_header{.type = 7, .channel_id = 3}.encode(); },
       frame_fault::unknown_channel,
       {"close frame for channel 3", "addresses the connection (channel 0xffffffff)"}},
      {"frame after its channel's cancel",
       [=] {
         return concat({to_bytes(encode_cancel(1, 0).bytes()), buffer_header(1, 1, 2), filler(2, 0)});
       },
       frame_fault::unknown_channel,
       {"buffer frame for unknown channel 1"}},
      {"bytes after close",
       [] {
         return concat({to_bytes(encode_close("bye").bytes()), bytes(5)});
       },
       frame_fault::data_after_close,
       {"data after the close frame, from stream byte 31"}},
  };
  return cases;
}

}  // namespace

TEST_CASE("each malformed input is rejected with its own fault and a message naming the specifics", "[frame]") {
  std::set<frame_fault> faults_seen;
  for (const malformed_case& c : malformed_cases()) {
    const bytes stream = c.stream();
    // Whole, and one byte at a time: the verdict must not depend on how the stream was split.
    for (const bool bytewise : {false, true}) {
      INFO(c.name << (bytewise ? " (fed 1 byte at a time)" : " (fed whole)"));
      frame_decoder decoder = receiver_decoder();
      const outcome got = bytewise ? decode(decoder, stream, [] { return 1; }) : decode_whole(decoder, stream);
      REQUIRE(got.error.has_value());
      INFO("message: " << got.error->message());
      CHECK(decoder.fault() == c.fault);
      CHECK(got.error->code() == make_error_code(c.fault));
      for (const std::string& part : c.message_parts) CHECK_THAT(got.error->message(), Catch::Contains(part));
      faults_seen.insert(decoder.fault());
    }
  }
  CHECK(faults_seen.size() == static_cast<std::size_t>(frame_fault_count));  // every fault has a case
}

TEST_CASE("after a fault the decoder refuses everything with the same error", "[frame]") {
  frame_decoder decoder = receiver_decoder();
  const bytes bad = raw_header{.version = 2}.encode();
  std::span<const std::byte> chunk = bad;
  REQUIRE(decoder.next(chunk) == decode_step::failed);
  const std::string message = decoder.error().message();
  const std::uint64_t offset = decoder.stream_offset_bytes();

  stream_builder good;
  good.backlog(1, 1);
  std::span<const std::byte> more = good.stream;
  CHECK(decoder.next(more) == decode_step::failed);
  CHECK(more.size() == good.stream.size());  // nothing consumed
  CHECK(decoder.stream_offset_bytes() == offset);
  CHECK(decoder.error().message() == message);
  CHECK(decoder.fault() == frame_fault::unsupported_version);
  const auto finished = decoder.finish();
  REQUIRE_FALSE(finished.ok());
  CHECK(finished.error().message() == message);
  CHECK(decoder.failed());
}

TEST_CASE("bad magic is reported as soon as 4 bytes arrive, without waiting for a whole header", "[frame]") {
  frame_decoder decoder = receiver_decoder();
  const std::string_view http = "GET / HTTP/1.1";
  std::span<const std::byte> chunk = as_span(http.substr(0, 4));
  CHECK(decoder.next(chunk) == decode_step::failed);
  CHECK_THAT(decoder.error().message(), Catch::Contains("bad magic 47 45 54 20 (\"GET \")"));
}

TEST_CASE("a stream that ends at a frame boundary without close finishes cleanly but is not closed", "[frame]") {
  stream_builder b;
  b.backlog(1, 2);
  frame_decoder decoder = receiver_decoder();
  const outcome got = decode_whole(decoder, b.stream);
  CHECK_FALSE(got.error);
  CHECK(got.frames.size() == 1);
  CHECK_FALSE(decoder.close_received());
}

TEST_CASE("decoder configuration and channel registration errors say what is wrong", "[frame]") {
  CHECK_THROWS_WITH(frame_decoder({.max_payload_bytes = 0}), Catch::Contains("max_payload_bytes is 0"));
  CHECK_THROWS_WITH(frame_decoder({.max_payload_bytes = max_payload_limit_bytes + 1}),
                    Catch::Contains("must be 1..67108864"));
  CHECK_THROWS_WITH(frame_decoder({.max_channels = 0}), Catch::Contains("max_channels is 0"));

  frame_decoder decoder({.max_payload_bytes = 16, .max_channels = 2});
  decoder.add_channel(1);
  CHECK_THROWS_AS(decoder.add_channel(1), std::invalid_argument);
  CHECK_THROWS_WITH(decoder.add_channel(connection_channel_id), Catch::Contains("reserved for the connection"));
  decoder.add_channel(2);
  CHECK_THROWS_WITH(decoder.add_channel(3), Catch::Contains("all 2 channels are open"));
  CHECK(decoder.remove_channel(1));
  CHECK_FALSE(decoder.remove_channel(1));
  decoder.add_channel(3);
  CHECK(decoder.channels().size() == 2);
}

TEST_CASE("the sequence tracker agrees with a std::map through random inserts and erases", "[frame]") {
  std::mt19937 random(7);
  sequence_tracker tracker(64);
  std::map<std::uint32_t, channel_role> model;
  // Ids from a small range collide often, which exercises probing and backward-shift deletion.
  std::uniform_int_distribution<std::uint32_t> id(0, 200);
  for (int step = 0; step < 20000; ++step) {
    const std::uint32_t channel = id(random);
    if (random() % 2 == 0) {
      const auto role = random() % 2 == 0 ? channel_role::receives_data : channel_role::sends_data;
      const bool expect = model.size() < 64 && !model.contains(channel);
      REQUIRE(tracker.insert(channel, role) == expect);
      if (expect) model[channel] = role;
    } else {
      REQUIRE(tracker.erase(channel) == (model.erase(channel) == 1));
    }
    REQUIRE(tracker.size() == model.size());
    const std::uint32_t probe = id(random);
    const auto* found = tracker.find(probe);
    REQUIRE((found != nullptr) == model.contains(probe));
    if (found != nullptr) REQUIRE(found->role == model[probe]);
  }
  for (const auto& [channel, role] : model) REQUIRE(tracker.find(channel) != nullptr);
}

TEST_CASE("random and mutated input never crashes and always ends in frames or a named fault", "[frame]") {
  std::mt19937_64 random(0x5EED);
  const stream_builder valid = mixed_stream();
  std::set<frame_fault> faults_seen;
  int clean_ends = 0;
  for (int iteration = 0; iteration < 100'000; ++iteration) {
    bytes stream;
    switch (random() % 4) {
      case 0:  // noise, sometimes behind a valid magic and version
        stream.resize(random() % 64);
        for (auto& b : stream) b = static_cast<std::byte>(random());
        if (random() % 2 == 0 && stream.size() >= 6) std::memcpy(stream.data(), raw_header{}.encode().data(), 6);
        break;
      case 1: {  // a valid stream with flipped bytes
        stream = valid.stream;
        for (int flips = 1 + static_cast<int>(random() % 3); flips > 0; --flips) {
          stream[random() % stream.size()] ^= static_cast<std::byte>(1 + random() % 255);
        }
        break;
      }
      case 2: {  // a header field rewritten and the checksum resealed, so the deeper checks run
        stream = valid.stream;
        const std::size_t frame = valid.frame_offsets[random() % valid.frame_offsets.size()];
        const std::size_t field = 6 + random() % 18;
        stream[frame + field] = static_cast<std::byte>(random() % 3 == 0 ? random() : random() % 10);
        const std::uint32_t crc = crc32c(std::span(stream).subspan(frame, 24));
        for (int i = 0; i < 4; ++i) stream[frame + 24 + i] = static_cast<std::byte>(crc >> (8 * i));
        break;
      }
      default:  // a valid stream cut short
        stream.assign(valid.stream.begin(), valid.stream.begin() + random() % valid.stream.size());
        break;
    }
    frame_decoder decoder = receiver_decoder();
    const outcome got = decode(decoder, stream, [&] { return 1 + random() % 64; });
    if (got.error) {
      REQUIRE(decoder.failed());
      const int value = got.error->code().value();
      REQUIRE(got.error->code().category() == frame_category());
      REQUIRE((value >= 1 && value <= frame_fault_count));
      REQUIRE_FALSE(got.error->message().empty());
      faults_seen.insert(decoder.fault());
    } else {
      REQUIRE_FALSE(decoder.failed());
      REQUIRE(decoder.stream_offset_bytes() == stream.size());
      ++clean_ends;
    }
  }
  CHECK(clean_ends > 0);
  CHECK(faults_seen.size() >= 10);  // the fuzz reached the deep checks, not only the checksum
}
