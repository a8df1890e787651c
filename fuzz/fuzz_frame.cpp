// fuzz_frame: the TCP transport's frame decoder (buffers/frame.hpp), against a model of the
// protocol written from that header's comment.
//
// Input: a preamble, then the bytes the decoder receives.
//   byte 0   options: bit 0 repairs every header's CRC before decoding (so mutations get past the
//            checksum to the checks behind it); bits 1-2 pick max_payload_bytes (16, 256, 4096,
//            32768); bits 3-4 max_channels (1, 2, 8, 1024)
//   byte 1   n: this side registers n % 9 channels with add_channel, their u32 ids following
//   rest     the stream
//
// Properties:
// - the decoder yields exactly the frames the model accepts; a frame it rejects is one the model
//   rejects, with a fault the model finds, and the error names the frame's stream offset;
// - add_channel throws exactly where the model says, and afterwards the decoder's open channels
//   (role and next sequence) are the model's;
// - every frame yielded, encoded again with encode_header/encode_*, is the bytes it came from;
// - a second decoder fed the same stream in chunks cut anywhere, taking payloads by take_payload or
//   by payload_received, yields the same frames, the same verdict and the same message;
// - finish() succeeds exactly at a frame boundary or after close, and fails with `truncated`
//   otherwise; a failed decoder keeps its error and consumes nothing.

#include "fuzz_support.hpp"

#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/frame.hpp>

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

using namespace sluice::buffers;
using sluice::fuzz::chunk_splitter;

namespace {

std::uint64_t load_le(const std::byte* p, std::size_t bytes) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}
void store_le32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

struct setup {
  frame_decoder_config config;
  std::vector<std::uint32_t> channels;  // to register, in order
  std::vector<std::byte> stream;
};

setup parse_input(std::span<const std::byte> input) {
  setup s;
  constexpr std::uint32_t payloads[] = {16, 256, 4096, 32768};
  constexpr std::uint32_t channel_limits[] = {1, 2, 8, 1024};  // (4096 would be 30 times slower under ASan)
  const auto options = input.empty() ? 0u : std::to_integer<unsigned>(input[0]);
  s.config.max_payload_bytes = payloads[(options >> 1) & 3];
  s.config.max_channels = channel_limits[(options >> 3) & 3];
  std::size_t at = 1;
  const std::size_t n = input.size() > 1 ? std::to_integer<unsigned>(input[1]) % 9 : 0;
  at = std::min<std::size_t>(input.size(), 2);
  for (std::size_t i = 0; i < n && at + 4 <= input.size(); ++i, at += 4) {
    s.channels.push_back(static_cast<std::uint32_t>(load_le(input.data() + at, 4)));
  }
  s.stream.assign(input.begin() + static_cast<std::ptrdiff_t>(at), input.end());
  if ((options & 1) != 0) {
    // Walk the frames as their lengths say and give each whole header its right CRC.
    std::uint64_t p = 0;
    while (p + frame_header_bytes <= s.stream.size()) {
      std::byte* h = s.stream.data() + p;
      store_le32(h + 24, crc32c(std::span<const std::byte>(h, 24)));
      p += frame_header_bytes + load_le(h + 12, 4);
    }
  }
  return s;
}

// ---- the model ------------------------------------------------------------------------------------

struct model_channel {
  channel_role role;
  std::uint64_t next_sequence;
};

// What add_channel did or must do: add the channel, or throw one of these.
enum class add_result { added, invalid_argument, length_error };

struct model_verdict {
  std::vector<frame_header> frames;  // accepted, complete
  std::uint64_t end_offset = 0;      // where the accepted frames end
  enum class kind { clean, truncated, failed } outcome = kind::clean;
  std::set<frame_fault> faults;      // failed: the faults the rejected frame has
};

class protocol_model {
 public:
  explicit protocol_model(const frame_decoder_config& config) : config_(config) {}

  add_result add_channel(std::uint32_t id) {
    if (id == connection_channel_id || open_.contains(id)) return add_result::invalid_argument;
    if (open_.size() == config_.max_channels) return add_result::length_error;
    open_[id] = {channel_role::receives_data, 0};
    return add_result::added;
  }

  model_verdict run(std::span<const std::byte> stream) {
    model_verdict v;
    std::uint64_t p = 0;
    bool closed = false;
    const auto fail = [&](std::set<frame_fault> faults) {
      v.outcome = model_verdict::kind::failed;
      v.faults = std::move(faults);
      v.end_offset = p;
      return v;
    };
    for (;;) {
      v.end_offset = p;
      const std::uint64_t left = stream.size() - p;
      if (closed) return left == 0 ? v : fail({frame_fault::data_after_close});
      if (left == 0) return v;
      const std::byte* h = stream.data() + p;
      if (left >= 4 && std::memcmp(h, frame_magic.data(), 4) != 0) return fail({frame_fault::bad_magic});
      if (left >= 6 && load_le(h + 4, 2) != frame_version) return fail({frame_fault::unsupported_version});
      if (left < frame_header_bytes) {
        v.outcome = model_verdict::kind::truncated;
        return v;
      }
      if (load_le(h + 24, 4) != crc32c(std::span<const std::byte>(h, 24))) {
        return fail({frame_fault::header_checksum_mismatch});
      }
      const auto raw_type = std::to_integer<std::uint8_t>(h[6]);
      if (raw_type < 1 || raw_type > 7) return fail({frame_fault::unknown_type});
      const frame_header header{static_cast<frame_type>(raw_type), std::to_integer<std::uint8_t>(h[7]),
                                static_cast<std::uint32_t>(load_le(h + 8, 4)), load_le(h + 16, 8),
                                static_cast<std::uint32_t>(load_le(h + 12, 4))};
      std::set<frame_fault> faults = header_faults(header);
      if (!faults.empty()) return fail(std::move(faults));
      apply(header);
      if (left < frame_header_bytes + std::uint64_t{header.payload_bytes}) {
        v.outcome = model_verdict::kind::truncated;
        return v;
      }
      if (header.type == frame_type::add_credit && load_le(h + frame_header_bytes, 4) == 0) {
        return fail({frame_fault::invalid_payload});
      }
      v.frames.push_back(header);
      p += frame_header_bytes + header.payload_bytes;
      closed = header.type == frame_type::close;
    }
  }

  const std::map<std::uint32_t, model_channel>& open() const noexcept { return open_; }

 private:
  std::set<frame_fault> header_faults(const frame_header& h) const {
    std::set<frame_fault> faults;
    const bool data = h.type == frame_type::buffer || h.type == frame_type::event;
    const std::uint8_t allowed = h.type == frame_type::event ? frame_flags::priority : 0;
    if ((h.flags & ~allowed) != 0) faults.insert(frame_fault::unknown_flags);
    if (data && h.payload_bytes > config_.max_payload_bytes) faults.insert(frame_fault::oversized_payload);
    const bool length_ok = [&] {
      switch (h.type) {
        case frame_type::partition_request: return h.payload_bytes == 16;
        case frame_type::buffer:
        case frame_type::event: return h.payload_bytes >= 1;
        case frame_type::add_credit:
        case frame_type::backlog: return h.payload_bytes == 4;
        case frame_type::cancel: return h.payload_bytes == 0;
        case frame_type::close: return h.payload_bytes <= max_close_reason_bytes;
      }
      return false;
    }();
    if (!length_ok) faults.insert(frame_fault::invalid_payload_length);

    if (h.type == frame_type::close) {
      if (h.channel_id != connection_channel_id) faults.insert(frame_fault::unknown_channel);
      if (h.sequence != 0) faults.insert(frame_fault::out_of_sequence);
      return faults;
    }
    if (h.channel_id == connection_channel_id) {
      faults.insert(frame_fault::unknown_channel);
      return faults;
    }
    const auto it = open_.find(h.channel_id);
    if (h.type == frame_type::partition_request) {
      if (it != open_.end()) faults.insert(frame_fault::channel_already_open);
      if (open_.size() == config_.max_channels) faults.insert(frame_fault::too_many_channels);
      if (h.sequence != 0) faults.insert(frame_fault::out_of_sequence);
      return faults;
    }
    if (it == open_.end()) {
      faults.insert(frame_fault::unknown_channel);
      return faults;
    }
    // add-credit flows to a channel's sender; buffer, event and backlog to its receiver.
    const bool direction_ok = h.type == frame_type::cancel ||
                              it->second.role == (h.type == frame_type::add_credit ? channel_role::sends_data
                                                                                   : channel_role::receives_data);
    if (!direction_ok) faults.insert(frame_fault::wrong_direction);
    if (h.sequence != it->second.next_sequence) faults.insert(frame_fault::out_of_sequence);
    return faults;
  }

  void apply(const frame_header& h) {
    switch (h.type) {
      case frame_type::close: break;
      case frame_type::partition_request: open_[h.channel_id] = {channel_role::sends_data, 1}; break;
      case frame_type::cancel: open_.erase(h.channel_id); break;
      default: ++open_[h.channel_id].next_sequence; break;
    }
  }

  frame_decoder_config config_;
  std::map<std::uint32_t, model_channel> open_;
};

// ---- driving the decoder --------------------------------------------------------------------------

struct decoded_frame {
  frame_header header;
  std::vector<std::byte> payload;  // a data frame's payload, or a control frame's re-encoding
  friend bool operator==(const decoded_frame&, const decoded_frame&) = default;
};

struct decode_run {
  std::vector<decoded_frame> frames;
  bool failed = false;
  int fault = 0;
  std::string message;  // the decoder's error, or finish()'s
  bool finish_ok = false;
  std::uint64_t stream_offset = 0;
  std::vector<add_result> added;         // what add_channel did, per channel of the setup
  std::optional<frame_decoder> decoder;  // as the run left it
};

// A control frame encoded again from what control() says it holds.
std::vector<std::byte> reencode(const control_frame& frame) {
  const frame_header& h = frame.header;
  encoded_frame e;
  switch (h.type) {
    case frame_type::partition_request:
      e = encode_partition_request(h.channel_id, h.sequence, std::get<partition_request>(frame.payload));
      break;
    case frame_type::add_credit:
      e = encode_add_credit(h.channel_id, h.sequence, std::get<add_credit>(frame.payload));
      break;
    case frame_type::backlog:
      e = encode_backlog(h.channel_id, h.sequence, std::get<backlog_announcement>(frame.payload));
      break;
    case frame_type::cancel:
      e = encode_cancel(h.channel_id, h.sequence);
      break;
    case frame_type::close:
      e = encode_close(std::get<close_connection>(frame.payload).reason);
      break;
    case frame_type::buffer:
    case frame_type::event:
      FUZZ_REQUIRE(false, "control() yielded a {} frame", to_string(h.type));
  }
  const auto bytes = e.bytes();
  return {bytes.begin(), bytes.end()};
}

// Feeds `stream` to a fresh decoder, whole (splitter null) or in chunks the splitter cuts.
decode_run decode(const setup& s, chunk_splitter* splitter) {
  decode_run run;
  frame_decoder& decoder = run.decoder.emplace(s.config);
  for (std::uint32_t id : s.channels) {
    add_result result = add_result::added;
    try {
      decoder.add_channel(id);
    } catch (const std::length_error&) {
      result = add_result::length_error;
    } catch (const std::invalid_argument&) {
      result = add_result::invalid_argument;
    }
    run.added.push_back(result);
  }
  std::span<const std::byte> rest(s.stream);
  std::optional<decoded_frame> data;  // the data frame whose payload is arriving
  bool stop = false;
  while (!stop) {
    const std::size_t n = splitter == nullptr || rest.empty() ? rest.size() : splitter->next(rest.size());
    std::span<const std::byte> chunk = rest.first(n);
    rest = rest.subspan(n);
    for (bool more = true; more && !stop;) {
      const std::size_t before = chunk.size();
      switch (decoder.next(chunk)) {
        case decode_step::need_input:
          FUZZ_REQUIRE(chunk.empty(), "need_input with {} bytes left in the chunk", chunk.size());
          more = false;
          break;
        case decode_step::control:
          run.frames.push_back({decoder.header(), reencode(decoder.control())});
          break;
        case decode_step::payload: {
          if (data) {
            FUZZ_REQUIRE(chunk.size() == before, "next() consumed {} bytes in the payload state", before - chunk.size());
          } else {
            FUZZ_REQUIRE(decoder.payload_received_bytes() == 0, "a new payload starts at {}",
                         decoder.payload_received_bytes());
            FUZZ_REQUIRE(decoder.header().payload_bytes <= s.config.max_payload_bytes, "payload of {} bytes yielded",
                         decoder.header().payload_bytes);
            data = decoded_frame{decoder.header(), std::vector<std::byte>(decoder.header().payload_bytes)};
          }
          if (chunk.empty()) {
            more = false;
            break;
          }
          const std::uint32_t remaining = decoder.payload_remaining_bytes();
          if (splitter == nullptr || splitter->coin()) {
            const std::size_t took = decoder.take_payload(chunk, data->payload);
            FUZZ_REQUIRE(took == std::min<std::size_t>(remaining, took + chunk.size()), "take_payload took {} of {}",
                         took, remaining);
          } else {  // as a transport that receives straight into its buffer
            const std::size_t got = std::min<std::size_t>(remaining, chunk.size());
            std::memcpy(data->payload.data() + decoder.payload_received_bytes(), chunk.data(), got);
            chunk = chunk.subspan(got);
            decoder.payload_received(got);
          }
          if (decoder.payload_remaining_bytes() == 0) {
            run.frames.push_back(std::move(*data));
            data.reset();
          }
          break;
        }
        case decode_step::failed:
          stop = true;
          break;
      }
    }
    if (rest.empty()) break;
  }
  run.stream_offset = decoder.stream_offset_bytes();
  if (decoder.failed()) {
    run.failed = true;
    run.fault = static_cast<int>(decoder.fault());
    run.message = decoder.error().message();
    // It stays failed: consumes nothing, and finish() repeats the error.
    std::span<const std::byte> again(s.stream);
    FUZZ_REQUIRE(decoder.next(again) == decode_step::failed && again.size() == s.stream.size(),
                 "a failed decoder consumed input");
    const auto finished = decoder.finish();
    FUZZ_REQUIRE(!finished && finished.error().message() == run.message, "finish() after a fault changed the error");
    return run;
  }
  const auto finished = decoder.finish();
  run.finish_ok = finished.ok();
  if (!finished) {
    run.fault = static_cast<int>(decoder.fault());
    run.message = finished.error().message();
  }
  return run;
}

void check_against_model(const setup& s, const decode_run& run) {
  protocol_model model(s.config);
  for (std::size_t i = 0; i < s.channels.size(); ++i) {
    const auto expected = model.add_channel(s.channels[i]);
    FUZZ_REQUIRE(run.added[i] == expected, "add_channel({}) gave {}, the model {}", s.channels[i],
                 static_cast<int>(run.added[i]), static_cast<int>(expected));
  }
  const model_verdict expected = model.run(s.stream);

  FUZZ_REQUIRE(run.frames.size() == expected.frames.size(), "decoder yielded {} frames, the model accepts {}",
               run.frames.size(), expected.frames.size());
  std::vector<std::byte> wire;  // the frames encoded again
  for (std::size_t i = 0; i < run.frames.size(); ++i) {
    const decoded_frame& f = run.frames[i];
    FUZZ_REQUIRE(f.header == expected.frames[i], "frame {}: the decoder's header differs from the model's", i);
    if (is_data_frame(f.header.type)) {
      header_bytes h;
      encode_header(f.header, h);
      wire.insert(wire.end(), h.begin(), h.end());
    }
    wire.insert(wire.end(), f.payload.begin(), f.payload.end());
  }
  FUZZ_REQUIRE(wire.size() == expected.end_offset, "the frames re-encode to {} bytes, they took {}", wire.size(),
               expected.end_offset);
  FUZZ_REQUIRE(std::equal(wire.begin(), wire.end(), s.stream.begin()),
               "re-encoding the decoded frames does not give the stream back");

  // The open channels, entry by entry (the decoder changes them only for a frame that passed).
  const frame_decoder& decoder = *run.decoder;
  FUZZ_REQUIRE(decoder.channels().size() == model.open().size(), "decoder tracks {} channels, the model {}",
               decoder.channels().size(), model.open().size());
  FUZZ_REQUIRE(decoder.channels().size() <= s.config.max_channels, "{} channels tracked", decoder.channels().size());
  for (const auto& [id, c] : model.open()) {
    const auto* e = decoder.channels().find(id);
    FUZZ_REQUIRE(e != nullptr, "channel {} is open in the model only", id);
    FUZZ_REQUIRE(e->role == c.role && e->next_sequence == c.next_sequence,
                 "channel {}: role {} next {} (model: role {} next {})", id, static_cast<int>(e->role),
                 e->next_sequence, static_cast<int>(c.role), c.next_sequence);
  }

  const std::string at = fmt::format("stream byte {}", expected.end_offset);
  switch (expected.outcome) {
    case model_verdict::kind::clean:
      FUZZ_REQUIRE(!run.failed && run.finish_ok, "the model accepts the whole stream, the decoder: {}", run.message);
      FUZZ_REQUIRE(run.stream_offset == s.stream.size(), "offset {} after {} bytes", run.stream_offset, s.stream.size());
      break;
    case model_verdict::kind::truncated:
      FUZZ_REQUIRE(!run.failed && !run.finish_ok && run.fault == static_cast<int>(frame_fault::truncated),
                   "a stream cut mid-frame: failed {}, finish_ok {}, '{}'", run.failed, run.finish_ok, run.message);
      FUZZ_REQUIRE(run.message.find(at) != std::string::npos, "'{}' does not name {}", run.message, at);
      break;
    case model_verdict::kind::failed:
      FUZZ_REQUIRE(run.failed, "the model rejects the frame at {}, the decoder did not", expected.end_offset);
      FUZZ_REQUIRE(expected.faults.contains(static_cast<frame_fault>(run.fault)), "fault {} ('{}') is not one the model found",
                   run.fault, run.message);
      FUZZ_REQUIRE(run.message.find(at) != std::string::npos, "'{}' does not name {}", run.message, at);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = sluice::fuzz::as_bytes(data, size);
  const setup s = parse_input(input);

  const decode_run whole = decode(s, nullptr);
  check_against_model(s, whole);

  chunk_splitter splitter(input);
  const decode_run chunked = decode(s, &splitter);
  FUZZ_REQUIRE(chunked.frames == whole.frames, "chunked: {} frames, whole: {}", chunked.frames.size(),
               whole.frames.size());
  FUZZ_REQUIRE(chunked.failed == whole.failed && chunked.fault == whole.fault && chunked.message == whole.message &&
                   chunked.finish_ok == whole.finish_ok,
               "chunked: '{}', whole: '{}'", chunked.message, whole.message);
  return 0;
}
