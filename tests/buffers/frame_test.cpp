// The wire frame codec: layout, round trips, reassembly from any split, and a named fault for every
// kind of malformed input (docs/design.md invariant 9, scenario 22); the faults are in
// frame_faults_test.cpp and CRC32C, which the header uses, in crc32c_test.cpp.

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
