#pragma once
// Helpers of the TCP transport tests: transports on loopback, raw frames, and a fake peer that
// speaks the wire protocol by hand (the hello, then frames) to play a misbehaving process.
// Coroutines here run on executor threads: they never use Catch2; a step that cannot go on throws
// (io::result::value()).

#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/frame.hpp>
#include <sluice/buffers/hello.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/task.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sluice::test::tcp {

using namespace sluice::buffers;
using sluice::io::address;
using runtime::task;

inline task<std::unique_ptr<tcp_transport>> start_transport(transport_options options) {
  auto t = co_await tcp_transport::start(address::loopback_v4(), options);
  co_return std::move(t).value();
}

// A raw header; the checksum is right unless changed afterwards.
inline std::vector<std::byte> raw_header(std::uint8_t type, std::uint32_t channel, std::uint32_t length,
                                         std::uint64_t seq, const char* magic = "SLCE", std::uint16_t version = 1,
                                         std::uint8_t flags = 0) {
  std::vector<std::byte> h(frame_header_bytes);
  std::memcpy(h.data(), magic, 4);
  auto put = [&](std::size_t at, std::uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h[at + i] = static_cast<std::byte>(v >> (8 * i));
  };
  put(4, version, 2);
  h[6] = std::byte{type};
  h[7] = std::byte{flags};
  put(8, channel, 4);
  put(12, length, 4);
  put(16, seq, 8);
  put(24, crc32c(std::span(h).first(24)), 4);
  return h;
}

inline std::vector<std::byte> concat(std::vector<std::byte> a, std::span<const std::byte> b) {
  const std::size_t at = a.size();
  a.resize(at + b.size());
  if (!b.empty()) std::memcpy(a.data() + at, b.data(), b.size());
  return a;
}
inline std::vector<std::byte> bytes_of(const encoded_frame& f) { return {f.bytes().begin(), f.bytes().end()}; }

// An event frame carrying `event` on `channel`.
inline std::vector<std::byte> event_frame(std::uint32_t channel, std::uint64_t seq, gate_event event,
                                          bool priority = false) {
  std::array<std::byte, max_event_bytes> payload{};
  const std::size_t n = encode_event(event, payload);
  header_bytes h;
  encode_header({frame_type::event, priority ? frame_flags::priority : std::uint8_t{0}, channel, seq,
                 static_cast<std::uint32_t>(n)},
                h);
  std::vector<std::byte> out(h.begin(), h.end());
  return concat(std::move(out), std::span(payload).first(n));
}

// What a fake peer read: a control frame (the close reason copied), or the end of the stream.
struct peer_frame {
  bool ended = false;  // the stream ended (or failed) instead
  frame_header header;
  control_payload payload;
  std::string close_reason;
};

// The identity a fake peer presents in its hello.
struct fake_identity {
  std::string job;
  std::uint64_t epoch = 0;
  std::string node_id;
  std::vector<std::byte> secret;
};

// One connection of a fake process, after the hello.
struct fake_peer {
  io::tcp_stream stream;
  frame_decoder decoder{{.max_payload_bytes = max_payload_limit_bytes, .max_channels = 4096}};
  std::vector<std::byte> chunk = std::vector<std::byte>(64 * 1024);
  std::size_t begin = 0;
  std::size_t end = 0;
  hello_outcome hello;  // what the hello settled

  // The next control frame from the transport (data frames are skipped).
  task<peer_frame> next_control() {
    std::vector<std::byte> sink;
    for (;;) {
      std::span<const std::byte> in(chunk.data() + begin, end - begin);
      const decode_step step = decoder.next(in);
      begin = end - in.size();
      if (step == decode_step::control) {
        const control_frame f = decoder.control();
        peer_frame out{false, f.header, f.payload, {}};
        if (const auto* c = std::get_if<close_connection>(&f.payload)) {
          out.close_reason = std::string(c->reason);
          out.payload = close_connection{};
        }
        co_return out;
      }
      if (step == decode_step::payload) {
        sink.resize(decoder.header().payload_bytes);
        decoder.take_payload(in, sink);
        begin = end - in.size();
        while (decoder.payload_remaining_bytes() > 0) {
          auto got = co_await stream.recv(std::span(sink).subspan(decoder.payload_received_bytes()));
          if (!got || got.value() == 0) co_return peer_frame{true};
          decoder.payload_received(got.value());
        }
        continue;
      }
      if (step == decode_step::failed) co_return peer_frame{true};
      begin = end = 0;
      auto got = co_await stream.recv(chunk);
      if (!got || got.value() == 0) co_return peer_frame{true};
      end = got.value();
    }
  }
  task<void> send(std::vector<std::byte> bytes) {
    auto sent = co_await stream.send_all(bytes);
    sent.value();
  }
  // Reads until the transport closes the connection.
  task<void> drain() {
    for (;;) {
      peer_frame f = co_await next_control();
      if (f.ended) co_return;
    }
  }
};

inline hello_identity identity_of(const fake_identity* who) {
  if (who == nullptr) return {};
  return {who->job, who->epoch, who->node_id, who->secret};
}

// Accepts one connection on `listener` and runs the hello as the accepting side. `who` (null: the
// default identity, as transport_options{}) by pointer: a braced temporary of a class with strings in
// a co_await expression trips GCC 12 (fixed_text.hpp).
inline task<fake_peer> accept_peer(io::tcp_listener* listener, const fake_identity* who = nullptr) {
  auto accepted = co_await listener->accept();
  fake_peer p;
  p.stream = std::move(accepted).value();
  const hello_identity me = identity_of(who);
  std::function<bool(const peer_hello&)> keep = [](const peer_hello&) { return true; };
  p.hello = co_await exchange_hello(&p.stream, &me, false, std::move(keep));
  co_return p;
}
// Dials `target` and runs the hello as the dialing side.
inline task<fake_peer> dial_peer(address target, const fake_identity* who = nullptr) {
  auto connected = co_await io::tcp_stream::connect(target);
  fake_peer p;
  p.stream = std::move(connected).value();
  const hello_identity me = identity_of(who);
  std::function<bool(const peer_hello&)> keep = [](const peer_hello&) { return true; };
  p.hello = co_await exchange_hello(&p.stream, &me, true, std::move(keep));
  co_return p;
}

}  // namespace sluice::test::tcp
