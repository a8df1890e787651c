// The hello's messages (hello.hpp) as a pure codec: what is encoded decodes back, a proof depends on
// every input it covers, and a damaged or foreign message is refused with the fault named.
#include <sluice/buffers/hello.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstring>
#include <string>
#include <vector>

using namespace sluice::buffers;

namespace {
std::span<const std::byte, hello_header_bytes> head(const std::vector<std::byte>& m) {
  return std::span<const std::byte, hello_header_bytes>(m.data(), hello_header_bytes);
}
}  // namespace

TEST_CASE("a hello decodes back to what was encoded", "[hello][codec]") {
  std::array<std::byte, hello_nonce_bytes> nonce{};
  for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<std::byte>(i);
  const hello_identity me{"wordcount", 7, "10.0.0.1:7000", std::vector<std::byte>(32, std::byte{1})};
  const std::vector<std::byte> m = encode_hello(me, nonce);
  auto h = decode_hello_header(head(m));
  REQUIRE(h);
  CHECK(h.value().type == hello_type::hello);
  CHECK(h.value().body_bytes + hello_header_bytes + 4 == m.size());
  auto peer = decode_hello_body(m);
  REQUIRE(peer);
  CHECK(peer.value().job == "wordcount");
  CHECK(peer.value().epoch == 7);
  CHECK(peer.value().node_id == "10.0.0.1:7000");
  CHECK(peer.value().has_secret);
  CHECK(peer.value().nonce == nonce);
  CHECK(check_peer_hello(me, peer.value()).first == hello_refusal::same_node);

  const std::vector<std::byte> refuse = encode_refuse(hello_refusal::stale_epoch, "stale epoch 5");
  auto r = decode_refuse_body(refuse);
  REQUIRE(r);
  CHECK(r.value().first == hello_refusal::stale_epoch);
  CHECK(r.value().second == "stale epoch 5");
}

TEST_CASE("a damaged or foreign hello is refused with the fault named", "[hello][codec]") {
  std::array<std::byte, hello_nonce_bytes> nonce{};
  std::vector<std::byte> m = encode_hello({"job", 1, "a", {}}, nonce);
  std::vector<std::byte> flipped = m;
  flipped[hello_header_bytes + 1] ^= std::byte{1};
  auto bad_crc = decode_hello_body(flipped);
  REQUIRE_FALSE(bad_crc);
  CHECK(bad_crc.error().message().find("checksum") != std::string::npos);
  std::vector<std::byte> http(hello_header_bytes);
  std::memcpy(http.data(), "GET / HTTP/1", hello_header_bytes);
  auto foreign = decode_hello_header(head(http));
  REQUIRE_FALSE(foreign);
  CHECK(foreign.error().message().find("bad magic 'GET '") != std::string::npos);
  std::vector<std::byte> big = m;
  big[8] = std::byte{0xFF};
  big[9] = std::byte{0xFF};
  auto oversized = decode_hello_header(head(big));
  REQUIRE_FALSE(oversized);
  CHECK(oversized.error().message().find("at most 1024") != std::string::npos);
  std::vector<std::byte> frames = m;
  std::memcpy(frames.data(), "SLCE", 4);
  auto old = decode_hello_header(head(frames));
  REQUIRE_FALSE(old);
  CHECK(old.error().message().find("without a hello") != std::string::npos);
}

TEST_CASE("a hello proof changes with the secret, the role, each nonce, the job, the epoch and each id",
          "[hello][codec]") {
  std::array<std::byte, hello_nonce_bytes> n1{}, n2{};
  n2[0] = std::byte{1};
  const std::vector<std::byte> k(32, std::byte{7}), k2(32, std::byte{8});
  const auto base = hello_proof(k, 'D', "job", 3, "a", "b", n1, n2);
  CHECK(base == hello_proof(k, 'D', "job", 3, "a", "b", n1, n2));
  CHECK(base != hello_proof(k2, 'D', "job", 3, "a", "b", n1, n2));
  CHECK(base != hello_proof(k, 'A', "job", 3, "a", "b", n1, n2));
  CHECK(base != hello_proof(k, 'D', "job", 3, "a", "b", n2, n1));
  CHECK(base != hello_proof(k, 'D', "jo", 3, "a", "b", n1, n2));
  CHECK(base != hello_proof(k, 'D', "job", 4, "a", "b", n1, n2));
  CHECK(base != hello_proof(k, 'D', "job", 3, "b", "a", n1, n2));
  CHECK(base != hello_proof({}, 'D', "job", 3, "a", "b", n1, n2));
}
