// The wire frame codec's faults: every kind of malformed input is rejected with a fault of its own
// and a message naming the specifics, and the decoder stays failed (docs/design.md invariant 9,
// scenario 22). Layout and round trips: frame_test.cpp.

#include "frame_support.hpp"

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
using namespace sluice::test::frames;

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

