#pragma once
// hello: how two transport peers open a connection before any frame (tcp_transport.hpp). It
// authenticates the peer with a shared secret, fences it by job and epoch, and settles two workers
// that dial each other at once onto one connection.
//
// Exchange (both sides send their messages without waiting where they can):
//   1. Both send HELLO: job name, epoch, node id, whether they hold a secret, and a 32-byte nonce
//      (RAND_bytes; all zero when there is no secret, so a job without one stays deterministic).
//   2. Each checks the peer's hello: the same job, the same epoch, another node id, the same use of
//      a secret. Otherwise it sends REFUSE (a code and a text) and closes.
//   3. Both send PROOF = HMAC-SHA256(secret, "sluice hello 1" | role | dialer nonce | acceptor nonce
//      | job | epoch | dialer id | acceptor id), role 'D' for the dialer's proof, 'A' for the
//      acceptor's, so a proof cannot be reflected; each compares the peer's in constant time
//      (CRYPTO_memcmp). A wrong proof: REFUSE, close.
//   4. The ARBITER (the side with the smaller node id; the acceptor when the ids are equal) sends
//      WELCOME, or REFUSE(duplicate) when it already has a connection to that node (two workers
//      dialed each other at once: each pair has one arbiter, which keeps the first one proven). The
//      other side waits for that answer. Then both speak frames.
// A side decides from its own checks, so each rejection has a reason on both sides; the peer's
// REFUSE text is only reported. A dialer retries (tcp_transport.hpp) when the peer is at an older
// epoch (not at this one yet), when the peer closed or reset the connection during the hello, and
// after REFUSE(duplicate); never after a wrong job, a wrong secret or a newer peer epoch.
//
// What the secret protects: only peers that know it (and run the same job at the same epoch) open
// connections, so a stray or stale worker, or anyone else who can reach the port, cannot feed or
// drain channels. What it does not: nothing is encrypted, and after the hello the frames are
// protected by TCP's checksum and the frame header CRC only: anyone on the path can read them, and
// one who can inject or rewrite packets can alter them. Use a private network or a tunnel for that.
//
// Message: magic "SLCH", version u16 (1), type u8, flags u8 (0), body length u32 (at most
// max_hello_body_bytes), the body, then a CRC32C u32 of everything before it. Little-endian.
//   1 hello    job u8 length + bytes, epoch u64, node id u8 length + bytes, secret u8 (0/1), nonce 32
//   2 proof    32 bytes
//   3 welcome  0 bytes
//   4 refuse   code u8, then the reason text (at most 512 bytes)
//
//   hello_identity me{.job = "wordcount", .epoch = 7, .node_id = "10.0.0.1:7000", .secret = key};
//   hello_outcome o = co_await exchange_hello(&stream, &me, /*dialed=*/true, keep_first);

#include <sluice/io/result.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/task.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::buffers {

inline constexpr std::array<std::byte, 4> hello_magic = {std::byte{'S'}, std::byte{'L'}, std::byte{'C'},
                                                         std::byte{'H'}};
inline constexpr std::uint16_t hello_version = 1;
inline constexpr std::size_t hello_header_bytes = 12;
inline constexpr std::size_t max_hello_body_bytes = 1024;
inline constexpr std::size_t max_hello_name_bytes = 255;  // job name, node id
inline constexpr std::size_t max_refuse_reason_bytes = 512;
inline constexpr std::size_t hello_nonce_bytes = 32;
inline constexpr std::size_t hello_proof_bytes = 32;

enum class hello_type : std::uint8_t { hello = 1, proof = 2, welcome = 3, refuse = 4 };

// Why a hello failed; also the code of a REFUSE message. tcp_transport counts each.
enum class hello_refusal : std::uint8_t {
  none = 0,
  malformed = 1,       // not a hello (another protocol, garbage, a bad checksum)
  wrong_job = 2,
  stale_epoch = 3,     // the peer's epoch is older than this side's
  future_epoch = 4,    // the peer's epoch is newer than this side's
  authentication = 5,  // a wrong secret, or one side has none
  same_node = 6,       // the peer claims this side's node id
  duplicate = 7,       // the arbiter keeps another connection to this node
  closed = 8,          // the peer closed or reset the connection during the hello
  timeout = 9,         // no complete hello within hello_timeout
};
std::string_view to_string(hello_refusal r) noexcept;

// Who this side is. `secret` empty: no authentication (the job and epoch are still checked).
struct hello_identity {
  std::string job;
  std::uint64_t epoch = 0;
  std::string node_id;
  std::vector<std::byte> secret;
};

struct peer_hello {
  std::string job;
  std::uint64_t epoch = 0;
  std::string node_id;
  bool has_secret = false;
  std::array<std::byte, hello_nonce_bytes> nonce{};
};

struct hello_outcome {
  bool ok = false;  // the connection carries frames now
  hello_refusal refusal = hello_refusal::none;
  std::string reason;        // why not, as this side saw it: "stale epoch 5 (this job is at epoch 7)"
  std::string peer_reason;   // the REFUSE text the peer sent, if any
  bool retry = false;        // for a dialer: worth dialing again
  peer_hello peer;           // what the peer said (valid once its hello was read)
};

// --- the codec (pure) ---------------------------------------------------------------------------
std::vector<std::byte> encode_hello(const hello_identity& self, std::span<const std::byte, hello_nonce_bytes> nonce);
std::vector<std::byte> encode_proof(std::span<const std::byte, hello_proof_bytes> proof);
std::vector<std::byte> encode_welcome();
std::vector<std::byte> encode_refuse(hello_refusal code, std::string_view reason);

struct hello_header {
  hello_type type = hello_type::hello;
  std::uint32_t body_bytes = 0;
};
// Checks magic, version, type, flags and length; the error names the fault.
io::result<hello_header> decode_hello_header(std::span<const std::byte, hello_header_bytes> bytes);
// `message` is the whole message (header, body, CRC); checks the CRC and the body.
io::result<peer_hello> decode_hello_body(std::span<const std::byte> message);
io::result<std::array<std::byte, hello_proof_bytes>> decode_proof_body(std::span<const std::byte> message);
io::result<std::pair<hello_refusal, std::string>> decode_refuse_body(std::span<const std::byte> message);

// The proof of the side `role` ('D' dialer, 'A' acceptor) over both nonces, the job, the epoch and
// both node ids.
std::array<std::byte, hello_proof_bytes> hello_proof(std::span<const std::byte> secret, char role, std::string_view job,
                                                     std::uint64_t epoch, std::string_view dialer_id,
                                                     std::string_view acceptor_id,
                                                     std::span<const std::byte, hello_nonce_bytes> dialer_nonce,
                                                     std::span<const std::byte, hello_nonce_bytes> acceptor_nonce);

// This side's verdict on the peer's hello: refusal none when it may go on to the proofs.
std::pair<hello_refusal, std::string> check_peer_hello(const hello_identity& self, const peer_hello& peer);

// --- the exchange ---------------------------------------------------------------------------------
// Runs the hello on `stream` (nothing else may use it meanwhile) and reads exactly the hello's bytes,
// so the frames behind it stay in the socket. `keep` is asked on the arbiter side once the peer is
// proven: true keeps this connection (WELCOME), false answers REFUSE(duplicate). Bound it with
// with_timeout; a stopped exchange yields refusal timeout.
runtime::task<hello_outcome> exchange_hello(io::tcp_stream* stream, const hello_identity* self, bool dialed,
                                            std::function<bool(const peer_hello&)> keep);

}  // namespace sluice::buffers
