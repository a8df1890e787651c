// fuzz_hello: the data port's hello decoders (buffers/hello.hpp), the first bytes an unauthenticated
// peer gets to send, against a model written from that header's layout.
//
// Input: byte 0, options: bit 0 repairs the message's CRC32C (so mutations get past the checksum
// to the checks behind it); bit 1 also writes the header's body length from the input's length
// (so the body decoders see a whole message). The rest is one hello message as it arrives.
//
// Properties:
// - decode_hello_header accepts exactly the headers the model accepts (magic "SLCH", version 1,
//   type 1-4, flags 0, body length at most max_hello_body_bytes), with the model's type and length;
// - each body decoder (hello, proof, refuse) accepts exactly what the model accepts, and yields the
//   model's fields; a message with a wrong CRC is refused by every one;
// - a hello, proof or welcome that decodes, encoded again with encode_hello / encode_proof /
//   encode_welcome, is the message's bytes; a refuse is, when its text was printable;
// - check_peer_hello on a decoded hello gives the verdict the model's order of checks gives.

#include "fuzz_support.hpp"

#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/hello.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::buffers;

namespace {

std::uint64_t load_le(const std::byte* p, std::size_t bytes) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}
void store_le(std::byte* p, std::uint64_t v, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

// ---- the model --------------------------------------------------------------------------------------

struct model_header {
  std::uint8_t type = 0;
  std::uint32_t body = 0;
};

std::optional<model_header> model_decode_header(std::span<const std::byte> m) {
  if (m.size() < hello_header_bytes) return std::nullopt;
  if (std::memcmp(m.data(), "SLCH", 4) != 0 || load_le(m.data() + 4, 2) != 1) return std::nullopt;
  const auto type = std::to_integer<std::uint8_t>(m[6]);
  if (type < 1 || type > 4 || m[7] != std::byte{0}) return std::nullopt;
  const auto body = static_cast<std::uint32_t>(load_le(m.data() + 8, 4));
  if (body > max_hello_body_bytes) return std::nullopt;
  return model_header{type, body};
}

// The body of a whole message whose CRC matches; the body decoders do not look at the header's
// fields (decode_hello_header did), only at the sizes.
std::optional<std::span<const std::byte>> model_body(std::span<const std::byte> m) {
  if (m.size() < hello_header_bytes + 4) return std::nullopt;
  if (load_le(m.data() + m.size() - 4, 4) != crc32c(m.first(m.size() - 4))) return std::nullopt;
  return m.subspan(hello_header_bytes, m.size() - hello_header_bytes - 4);
}

// hello: job u8 length + bytes, epoch u64, node id u8 length + bytes, secret u8 (0/1), nonce 32.
std::optional<peer_hello> model_hello(std::span<const std::byte> m) {
  const auto body = model_body(m);
  if (!body) return std::nullopt;
  const std::span<const std::byte> b = *body;
  std::size_t at = 0;
  peer_hello h;
  const auto name = [&](std::string& out) {
    if (at + 1 > b.size()) return false;
    const std::size_t n = std::to_integer<std::uint8_t>(b[at]);
    if (at + 1 + n > b.size()) return false;
    out.assign(reinterpret_cast<const char*>(b.data() + at + 1), n);
    at += 1 + n;
    return true;
  };
  if (!name(h.job) || at + 8 > b.size()) return std::nullopt;
  h.epoch = load_le(b.data() + at, 8);
  at += 8;
  if (!name(h.node_id) || b.size() != at + 1 + hello_nonce_bytes) return std::nullopt;
  const auto flag = std::to_integer<std::uint8_t>(b[at]);
  if (flag > 1) return std::nullopt;
  h.has_secret = flag == 1;
  std::memcpy(h.nonce.data(), b.data() + at + 1, hello_nonce_bytes);
  return h;
}

std::optional<std::array<std::byte, hello_proof_bytes>> model_proof(std::span<const std::byte> m) {
  const auto body = model_body(m);
  if (!body || body->size() != hello_proof_bytes) return std::nullopt;
  std::array<std::byte, hello_proof_bytes> p{};
  std::memcpy(p.data(), body->data(), p.size());
  return p;
}

std::optional<std::pair<std::uint8_t, std::string>> model_refuse(std::span<const std::byte> m) {
  const auto body = model_body(m);
  if (!body || body->empty() || body->size() > 1 + max_refuse_reason_bytes) return std::nullopt;
  const auto code = std::to_integer<std::uint8_t>((*body)[0]);
  if (code < 1 || code > 9) return std::nullopt;
  std::string text;
  for (std::byte x : body->subspan(1)) {
    const auto c = std::to_integer<unsigned char>(x);
    text += (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '.';
  }
  return std::pair{code, std::move(text)};
}

// The order of check_peer_hello's checks, from hello.hpp: job, epoch, node id, use of a secret.
hello_refusal model_verdict(const hello_identity& self, const peer_hello& peer) {
  if (peer.job != self.job) return hello_refusal::wrong_job;
  if (peer.epoch < self.epoch) return hello_refusal::stale_epoch;
  if (peer.epoch > self.epoch) return hello_refusal::future_epoch;
  if (!self.node_id.empty() && peer.node_id == self.node_id) return hello_refusal::same_node;
  if (peer.has_secret == self.secret.empty()) return hello_refusal::authentication;
  return hello_refusal::none;
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = sluice::fuzz::as_bytes(data, size);
  const unsigned options = input.empty() ? 0u : std::to_integer<unsigned>(input[0]);
  std::vector<std::byte> m(input.begin() + (input.empty() ? 0 : 1), input.end());
  if ((options & 2) != 0 && m.size() >= hello_header_bytes + 4) {
    store_le(m.data() + 8, m.size() - hello_header_bytes - 4, 4);
  }
  if ((options & 1) != 0 && m.size() >= hello_header_bytes + 4) {
    store_le(m.data() + m.size() - 4, crc32c(std::span<const std::byte>(m).first(m.size() - 4)), 4);
  }
  const std::span<const std::byte> message(m);

  // The header.
  if (message.size() >= hello_header_bytes) {
    const auto header = decode_hello_header(message.first<hello_header_bytes>());
    const auto expected = model_decode_header(message);
    FUZZ_REQUIRE(header.ok() == expected.has_value(), "header: decoder {}, model {}: {}", header.ok(),
                 expected.has_value(), header.ok() ? std::string() : header.error().message());
    if (header.ok()) {
      FUZZ_REQUIRE(static_cast<std::uint8_t>(header->type) == expected->type && header->body_bytes == expected->body,
                   "header: type {} body {}, model type {} body {}", static_cast<int>(header->type),
                   header->body_bytes, expected->type, expected->body);
    } else {
      FUZZ_REQUIRE(!header.error().message().empty(), "a refused header without a message");
    }
  }
  const auto header = model_decode_header(message);
  // Whether the message is whole: its header's body length is what arrived.
  const bool whole = header && message.size() == hello_header_bytes + header->body + 4;

  // hello
  {
    const auto got = decode_hello_body(message);
    const auto expected = model_hello(message);
    FUZZ_REQUIRE(got.ok() == expected.has_value(), "hello: decoder {}, model {}: {}", got.ok(), expected.has_value(),
                 got.ok() ? std::string() : got.error().message());
    if (got.ok()) {
      FUZZ_REQUIRE(got->job == expected->job && got->epoch == expected->epoch && got->node_id == expected->node_id &&
                       got->has_secret == expected->has_secret && got->nonce == expected->nonce,
                   "hello: fields differ from the model's (job '{}', epoch {}, node '{}')", got->job, got->epoch,
                   got->node_id);
      if (whole && header->type == 1) {
        const hello_identity again{got->job, got->epoch, got->node_id,
                                   got->has_secret ? std::vector<std::byte>{std::byte{1}} : std::vector<std::byte>{}};
        const std::vector<std::byte> encoded = encode_hello(again, got->nonce);
        FUZZ_REQUIRE(same_bytes(encoded, message), "hello: encoding it again gives other bytes");
      }
      const hello_identity self{"wordcount", 7, "10.0.0.1:7000", std::vector<std::byte>(32, std::byte{'k'})};
      const auto [verdict, reason] = check_peer_hello(self, *got);
      FUZZ_REQUIRE(verdict == model_verdict(self, *got), "check_peer_hello: {} ({}), model {}", to_string(verdict),
                   reason, to_string(model_verdict(self, *got)));
      FUZZ_REQUIRE((verdict == hello_refusal::none) == reason.empty(), "verdict {} with reason '{}'",
                   to_string(verdict), reason);
    }
  }
  // proof
  {
    const auto got = decode_proof_body(message);
    const auto expected = model_proof(message);
    FUZZ_REQUIRE(got.ok() == expected.has_value(), "proof: decoder {}, model {}", got.ok(), expected.has_value());
    if (got.ok()) {
      FUZZ_REQUIRE(*got == *expected, "proof: bytes differ from the model's");
      if (whole && header->type == 2) {
        FUZZ_REQUIRE(same_bytes(encode_proof(*got), message), "proof: encoding it again gives other bytes");
      }
    }
  }
  // refuse
  {
    const auto got = decode_refuse_body(message);
    const auto expected = model_refuse(message);
    FUZZ_REQUIRE(got.ok() == expected.has_value(), "refuse: decoder {}, model {}", got.ok(), expected.has_value());
    if (got.ok()) {
      FUZZ_REQUIRE(static_cast<std::uint8_t>(got->first) == expected->first && got->second == expected->second,
                   "refuse: code {} '{}', model code {} '{}'", static_cast<int>(got->first), got->second,
                   expected->first, expected->second);
      const auto text = message.subspan(hello_header_bytes + 1, message.size() - hello_header_bytes - 5);
      const bool printable = std::all_of(text.begin(), text.end(), [](std::byte x) {
        const auto c = std::to_integer<unsigned char>(x);
        return c >= 0x20 && c < 0x7F;
      });
      if (whole && header->type == 4 && printable) {
        FUZZ_REQUIRE(same_bytes(encode_refuse(got->first, got->second), message),
                     "refuse: encoding it again gives other bytes");
      }
    }
  }
  // welcome: no decoder of its own (exchange_hello checks the CRC of an empty body).
  if (whole && header->type == 3 && header->body == 0 && model_body(message)) {
    FUZZ_REQUIRE(same_bytes(encode_welcome(), message), "welcome: encoding it again gives other bytes");
  }
  return 0;
}
