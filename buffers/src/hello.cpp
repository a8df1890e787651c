// The hello of transport connections (see hello.hpp for the exchange and the message format).
#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/hello.hpp>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <system_error>

namespace sluice::buffers {

namespace {

constexpr std::string_view proof_label = "sluice hello 1";

void put_le(std::vector<std::byte>& out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
std::uint64_t get_le(const std::byte* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | std::to_integer<std::uint8_t>(p[i]);
  return v;
}
// Byte by byte: hello messages are small, and GCC 12 at -O3 warns falsely on resize + memcpy here.
void put_bytes(std::vector<std::byte>& out, std::span<const std::byte> b) {
  for (std::byte x : b) out.push_back(x);
}
void put_text(std::vector<std::byte>& out, std::string_view s) { put_bytes(out, std::as_bytes(std::span(s))); }
void put_name(std::vector<std::byte>& out, std::string_view s) {
  assert(s.size() <= max_hello_name_bytes);
  put_le(out, s.size(), 1);
  put_text(out, s);
}

std::vector<std::byte> message(hello_type type, std::span<const std::byte> body) {
  assert(body.size() <= max_hello_body_bytes);
  std::vector<std::byte> out;
  out.reserve(hello_header_bytes + body.size() + 4);
  put_bytes(out, hello_magic);
  put_le(out, hello_version, 2);
  put_le(out, static_cast<std::uint8_t>(type), 1);
  put_le(out, 0, 1);
  put_le(out, body.size(), 4);
  put_bytes(out, body);
  put_le(out, crc32c(out), 4);
  return out;
}

io::error malformed(std::string what) {
  return io::error(std::make_error_code(std::errc::protocol_error), std::move(what));
}

std::string printable(std::span<const std::byte> bytes) {
  std::string s;
  for (std::byte b : bytes) {
    const auto c = std::to_integer<unsigned char>(b);
    s += (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '.';
  }
  return s;
}

// The body of a whole message, after its CRC is checked.
io::result<std::span<const std::byte>> checked_body(std::span<const std::byte> m) {
  if (m.size() < hello_header_bytes + 4) return malformed("hello message shorter than its header and checksum");
  const std::size_t body = m.size() - hello_header_bytes - 4;
  const auto stored = static_cast<std::uint32_t>(get_le(m.data() + m.size() - 4, 4));
  const std::uint32_t computed = crc32c(m.first(m.size() - 4));
  if (stored != computed) {
    return malformed(fmt::format("hello message checksum {:#010x} does not match {:#010x}", stored, computed));
  }
  return m.subspan(hello_header_bytes, body);
}

}  // namespace

std::string_view to_string(hello_refusal r) noexcept {
  switch (r) {
    case hello_refusal::none: return "none";
    case hello_refusal::malformed: return "malformed";
    case hello_refusal::wrong_job: return "wrong-job";
    case hello_refusal::stale_epoch: return "stale-epoch";
    case hello_refusal::future_epoch: return "future-epoch";
    case hello_refusal::authentication: return "authentication";
    case hello_refusal::same_node: return "same-node";
    case hello_refusal::duplicate: return "duplicate";
    case hello_refusal::closed: return "closed";
    case hello_refusal::timeout: return "timeout";
  }
  return "unknown";
}

std::vector<std::byte> encode_hello(const hello_identity& self, std::span<const std::byte, hello_nonce_bytes> nonce) {
  std::vector<std::byte> body;
  put_name(body, self.job);
  put_le(body, self.epoch, 8);
  put_name(body, self.node_id);
  put_le(body, self.secret.empty() ? 0 : 1, 1);
  put_bytes(body, nonce);
  return message(hello_type::hello, body);
}
std::vector<std::byte> encode_proof(std::span<const std::byte, hello_proof_bytes> proof) {
  return message(hello_type::proof, proof);
}
std::vector<std::byte> encode_welcome() { return message(hello_type::welcome, {}); }
std::vector<std::byte> encode_refuse(hello_refusal code, std::string_view reason) {
  std::vector<std::byte> body;
  put_le(body, static_cast<std::uint8_t>(code), 1);
  put_text(body, reason.substr(0, max_refuse_reason_bytes));
  return message(hello_type::refuse, body);
}

io::result<hello_header> decode_hello_header(std::span<const std::byte, hello_header_bytes> b) {
  if (std::memcmp(b.data(), hello_magic.data(), hello_magic.size()) != 0) {
    const std::string magic = printable(b.first(4));
    if (magic == "SLCE") {
      return malformed("frames without a hello (magic 'SLCE'): a peer that predates the hello, or not a transport");
    }
    return malformed(fmt::format("not a sluice hello: bad magic '{}', expected 'SLCH'", magic));
  }
  const auto version = static_cast<std::uint16_t>(get_le(b.data() + 4, 2));
  if (version != hello_version) {
    return malformed(fmt::format("hello version {} (this side speaks version {})", version, hello_version));
  }
  const auto type = std::to_integer<std::uint8_t>(b[6]);
  if (type < 1 || type > 4) return malformed(fmt::format("unknown hello message type {}", type));
  if (b[7] != std::byte{0}) return malformed(fmt::format("hello flags {:#04x}, expected 0", std::to_integer<unsigned>(b[7])));
  const auto body = static_cast<std::uint32_t>(get_le(b.data() + 8, 4));
  if (body > max_hello_body_bytes) {
    return malformed(fmt::format("hello message of {} bytes (at most {})", body, max_hello_body_bytes));
  }
  return hello_header{static_cast<hello_type>(type), body};
}

io::result<peer_hello> decode_hello_body(std::span<const std::byte> m) {
  io::result<std::span<const std::byte>> checked = checked_body(m);
  if (!checked) return std::move(checked).error();
  std::span<const std::byte> b = checked.value();
  peer_hello h;
  std::size_t at = 0;
  const auto name = [&](std::string& out) {
    if (at >= b.size()) return false;
    const std::size_t n = std::to_integer<std::uint8_t>(b[at++]);
    if (at + n > b.size()) return false;
    out.assign(reinterpret_cast<const char*>(b.data() + at), n);
    at += n;
    return true;
  };
  if (!name(h.job) || at + 8 > b.size()) return malformed("truncated hello (job name, epoch)");
  h.epoch = get_le(b.data() + at, 8);
  at += 8;
  if (!name(h.node_id) || at + 1 + hello_nonce_bytes != b.size()) {
    return malformed("hello body of the wrong length (node id, secret flag, nonce)");
  }
  const auto flag = std::to_integer<std::uint8_t>(b[at++]);
  if (flag > 1) return malformed(fmt::format("hello secret flag {}, expected 0 or 1", flag));
  h.has_secret = flag == 1;
  std::memcpy(h.nonce.data(), b.data() + at, hello_nonce_bytes);
  return h;
}

io::result<std::array<std::byte, hello_proof_bytes>> decode_proof_body(std::span<const std::byte> m) {
  io::result<std::span<const std::byte>> checked = checked_body(m);
  if (!checked) return std::move(checked).error();
  if (checked.value().size() != hello_proof_bytes) {
    return malformed(fmt::format("proof of {} bytes, expected {}", checked.value().size(), hello_proof_bytes));
  }
  std::array<std::byte, hello_proof_bytes> proof{};
  std::memcpy(proof.data(), checked.value().data(), proof.size());
  return proof;
}

io::result<std::pair<hello_refusal, std::string>> decode_refuse_body(std::span<const std::byte> m) {
  io::result<std::span<const std::byte>> checked = checked_body(m);
  if (!checked) return std::move(checked).error();
  std::span<const std::byte> b = checked.value();
  if (b.empty() || b.size() > 1 + max_refuse_reason_bytes) return malformed("refuse message of a bad length");
  const auto code = std::to_integer<std::uint8_t>(b[0]);
  if (code < 1 || code > static_cast<std::uint8_t>(hello_refusal::timeout)) {
    return malformed(fmt::format("unknown refusal code {}", code));
  }
  return std::pair{static_cast<hello_refusal>(code), printable(b.subspan(1))};
}

std::array<std::byte, hello_proof_bytes> hello_proof(std::span<const std::byte> secret, char role, std::string_view job,
                                                     std::uint64_t epoch, std::string_view dialer_id,
                                                     std::string_view acceptor_id,
                                                     std::span<const std::byte, hello_nonce_bytes> dialer_nonce,
                                                     std::span<const std::byte, hello_nonce_bytes> acceptor_nonce) {
  std::vector<std::byte> data;
  put_text(data, proof_label);
  put_le(data, static_cast<unsigned char>(role), 1);
  put_bytes(data, dialer_nonce);
  put_bytes(data, acceptor_nonce);
  put_name(data, job);
  put_le(data, epoch, 8);
  put_name(data, dialer_id);
  put_name(data, acceptor_id);
  std::array<std::byte, hello_proof_bytes> out{};
  static const unsigned char no_key = 0;
  unsigned int size = 0;
  const unsigned char* key = secret.empty() ? &no_key : reinterpret_cast<const unsigned char*>(secret.data());
  const unsigned char* done = HMAC(EVP_sha256(), key, static_cast<int>(secret.size()),
                                   reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                                   reinterpret_cast<unsigned char*>(out.data()), &size);
  if (done == nullptr || size != hello_proof_bytes) out.fill(std::byte{0});  // verifies against nothing real
  return out;
}

std::pair<hello_refusal, std::string> check_peer_hello(const hello_identity& self, const peer_hello& peer) {
  if (peer.job != self.job) {
    return {hello_refusal::wrong_job, fmt::format("wrong job '{}' (this is job '{}')", peer.job, self.job)};
  }
  if (peer.epoch < self.epoch) {
    return {hello_refusal::stale_epoch,
            fmt::format("stale epoch {} (this job is at epoch {})", peer.epoch, self.epoch)};
  }
  if (peer.epoch > self.epoch) {
    return {hello_refusal::future_epoch,
            fmt::format("future epoch {} (this job is at epoch {})", peer.epoch, self.epoch)};
  }
  if (!self.node_id.empty() && peer.node_id == self.node_id) {
    return {hello_refusal::same_node, fmt::format("the peer claims this node's id '{}'", peer.node_id)};
  }
  if (peer.has_secret != !self.secret.empty()) {
    return {hello_refusal::authentication, peer.has_secret ? "the peer authenticates with a secret and this side has none"
                                                           : "the peer has no secret and this side requires one"};
  }
  return {hello_refusal::none, {}};
}

namespace {

struct received {
  io::result<void> status = io::success();  // an error: the stream ended or failed (closed)
  bool ended = false;
  hello_header header;
  std::vector<std::byte> bytes;  // the whole message
};

runtime::task<received> read_message(io::tcp_stream* stream) {
  received r;
  std::array<std::byte, hello_header_bytes> head{};
  io::result<std::size_t> got = co_await stream->recv_exact(head);
  if (!got || got.value() == 0) {
    r.ended = true;
    r.status = got ? io::result<void>(io::error(std::make_error_code(std::errc::connection_aborted),
                                                "the peer closed the connection during the hello"))
                   : io::result<void>(std::move(got).error());
    co_return r;
  }
  io::result<hello_header> header = decode_hello_header(head);
  if (!header) {
    r.status = std::move(header).error();
    co_return r;
  }
  r.header = header.value();
  r.bytes.resize(hello_header_bytes + r.header.body_bytes + 4);
  std::memcpy(r.bytes.data(), head.data(), head.size());
  got = co_await stream->recv_exact(std::span(r.bytes).subspan(hello_header_bytes));
  if (!got || got.value() == 0) {
    r.ended = true;
    r.status = got ? io::result<void>(io::error(std::make_error_code(std::errc::connection_aborted),
                                                "the peer closed the connection during the hello"))
                   : io::result<void>(std::move(got).error());
  }
  co_return r;
}

// Best effort: the peer learns why.
runtime::task<void> send_refuse(io::tcp_stream* stream, hello_refusal code, std::string reason) {
  const std::vector<std::byte> m = encode_refuse(code, reason);
  (void)co_await stream->send_all(m);
}

// Whether a dialer should try again after the peer refused with `code` (the peer's point of view).
bool worth_retrying(hello_refusal code) noexcept {
  return code == hello_refusal::future_epoch  // the peer has not reached this side's epoch
         || code == hello_refusal::duplicate || code == hello_refusal::closed || code == hello_refusal::timeout;
}

}  // namespace

runtime::task<hello_outcome> exchange_hello(io::tcp_stream* stream, const hello_identity* self, bool dialed,
                                            std::function<bool(const peer_hello&)> keep) {
  hello_outcome out;
  const auto fail = [&](hello_refusal code, std::string reason, bool retry) {
    out.refusal = code;
    out.reason = std::move(reason);
    out.retry = dialed && retry;
  };
  // A message from the peer that is not the one expected: its refusal, the end, or garbage.
  const auto unexpected = [&](received& r) {
    if (r.ended) {
      fail(hello_refusal::closed, r.status.error().message(), true);
    } else if (!r.status) {
      fail(hello_refusal::malformed, r.status.error().message(), false);
    } else if (r.header.type == hello_type::refuse) {
      io::result<std::pair<hello_refusal, std::string>> refused = decode_refuse_body(r.bytes);
      if (!refused) {
        fail(hello_refusal::malformed, refused.error().message(), false);
      } else {
        out.peer_reason = refused.value().second;
        fail(refused.value().first, fmt::format("refused by the peer: {}", refused.value().second),
             worth_retrying(refused.value().first));
      }
    } else {
      fail(hello_refusal::malformed, fmt::format("unexpected hello message type {}", static_cast<int>(r.header.type)),
           false);
    }
  };

  std::array<std::byte, hello_nonce_bytes> nonce{};
  if (!self->secret.empty() && RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), nonce.size()) != 1) {
    fail(hello_refusal::authentication, "RAND_bytes failed to make a nonce", false);
    co_return out;
  }
  const std::vector<std::byte> mine = encode_hello(*self, nonce);
  io::result<void> sent = co_await stream->send_all(mine);
  if (!sent) {
    fail(hello_refusal::closed, sent.error().message(), true);
    co_return out;
  }
  received r = co_await read_message(stream);
  if (r.ended || !r.status || r.header.type != hello_type::hello) {
    unexpected(r);
    co_return out;
  }
  io::result<peer_hello> peer = decode_hello_body(r.bytes);
  if (!peer) {
    fail(hello_refusal::malformed, peer.error().message(), false);
    co_return out;
  }
  out.peer = std::move(peer).value();

  std::pair<hello_refusal, std::string> verdict_and_reason = check_peer_hello(*self, out.peer);
  const hello_refusal verdict = verdict_and_reason.first;
  std::string why = std::move(verdict_and_reason.second);
  if (verdict != hello_refusal::none) {
    co_await send_refuse(stream, verdict, why);
    // A dialer whose peer is at an older epoch waits for it to come up to this one.
    fail(verdict, std::move(why), verdict == hello_refusal::stale_epoch);
    co_return out;
  }

  const std::string_view dialer_id = dialed ? self->node_id : out.peer.node_id;
  const std::string_view acceptor_id = dialed ? out.peer.node_id : self->node_id;
  const std::span<const std::byte, hello_nonce_bytes> dialer_nonce = dialed ? nonce : out.peer.nonce;
  const std::span<const std::byte, hello_nonce_bytes> acceptor_nonce = dialed ? out.peer.nonce : nonce;
  const auto proof_of = [&](char role) {
    return hello_proof(self->secret, role, self->job, self->epoch, dialer_id, acceptor_id, dialer_nonce,
                       acceptor_nonce);
  };
  const std::array<std::byte, hello_proof_bytes> my_proof = proof_of(dialed ? 'D' : 'A');
  const std::vector<std::byte> proof_message = encode_proof(my_proof);
  sent = co_await stream->send_all(proof_message);
  if (!sent) {
    fail(hello_refusal::closed, sent.error().message(), true);
    co_return out;
  }
  r = co_await read_message(stream);
  if (r.ended || !r.status || r.header.type != hello_type::proof) {
    unexpected(r);
    co_return out;
  }
  io::result<std::array<std::byte, hello_proof_bytes>> their = decode_proof_body(r.bytes);
  if (!their) {
    fail(hello_refusal::malformed, their.error().message(), false);
    co_return out;
  }
  const std::array<std::byte, hello_proof_bytes> expected = proof_of(dialed ? 'A' : 'D');
  if (CRYPTO_memcmp(expected.data(), their.value().data(), expected.size()) != 0) {
    const std::string reason = "authentication failed: the peer's proof does not match this side's secret";
    co_await send_refuse(stream, hello_refusal::authentication, reason);
    fail(hello_refusal::authentication, reason, false);
    co_return out;
  }

  const bool arbiter = self->node_id < out.peer.node_id || (self->node_id == out.peer.node_id && !dialed);
  if (arbiter) {
    if (!keep(out.peer)) {
      const std::string reason = fmt::format("duplicate: this side keeps another connection to node '{}'",
                                             out.peer.node_id);
      co_await send_refuse(stream, hello_refusal::duplicate, reason);
      fail(hello_refusal::duplicate, reason, true);
      co_return out;
    }
    const std::vector<std::byte> welcome = encode_welcome();
    sent = co_await stream->send_all(welcome);
    if (!sent) {
      fail(hello_refusal::closed, sent.error().message(), true);
      co_return out;
    }
  } else {
    r = co_await read_message(stream);
    if (r.ended || !r.status || r.header.type != hello_type::welcome || r.header.body_bytes != 0) {
      unexpected(r);
      co_return out;
    }
    if (io::result<std::span<const std::byte>> ok = checked_body(r.bytes); !ok) {
      fail(hello_refusal::malformed, ok.error().message(), false);
      co_return out;
    }
  }
  out.ok = true;
  co_return out;
}

}  // namespace sluice::buffers
