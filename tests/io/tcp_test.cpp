#include <sluice/io/tcp.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>
#include <support/fd_count.hpp>

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

using namespace sluice::io;
using sluice::runtime::io_op;
using sluice::runtime::op_code;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::runtime::test_backend;
using sluice::runtime::when_all;
using sluice::test::backend_kind;

namespace {

std::vector<std::byte> pattern(std::size_t size, unsigned seed) {
  std::vector<std::byte> bytes(size);
  unsigned x = seed;
  for (auto& b : bytes) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 16);
  }
  return bytes;
}

std::span<const std::byte> bytes_of(const std::uint32_t& v) { return std::as_bytes(std::span(&v, 1)); }

// Echoes length-prefixed messages until the client shuts down its side; yields the message count.
task<int> echo_messages(tcp_listener* listener) {
  auto conn = (co_await listener->accept()).value();
  conn.set_nodelay(true).value();  // header and body go out as two sends: no Nagle delay
  int count = 0;
  for (;;) {
    std::uint32_t size = 0;
    if ((co_await conn.recv_exact(std::as_writable_bytes(std::span(&size, 1)))).value() == 0) break;
    std::vector<std::byte> body(size);
    (co_await conn.recv_exact(body)).value();
    (co_await conn.send_all(bytes_of(size))).value();
    (co_await conn.send_all(body)).value();
    ++count;
  }
  (co_await conn.close()).value();
  co_return count;
}

// Sends `messages` messages of growing size, checks each echo; yields how many came back intact.
task<int> send_messages(address server, int messages) {
  auto conn = (co_await tcp_stream::connect(server)).value();
  conn.set_nodelay(true).value();
  int intact = 0;
  for (int i = 0; i < messages; ++i) {
    const auto body = pattern(static_cast<std::size_t>(i) * 37 % 5000, static_cast<unsigned>(i));
    const auto size = static_cast<std::uint32_t>(body.size());
    (co_await conn.send_all(bytes_of(size))).value();
    (co_await conn.send_all(body)).value();
    std::uint32_t echoed_size = 0;
    (co_await conn.recv_exact(std::as_writable_bytes(std::span(&echoed_size, 1)))).value();
    std::vector<std::byte> echoed(echoed_size);
    (co_await conn.recv_exact(echoed)).value();
    if (echoed == body) ++intact;
  }
  (co_await conn.shutdown()).value();
  std::byte end{};
  if ((co_await conn.recv(std::span(&end, 1))).value() != 0) intact = -1;  // the server closed after us
  co_return intact;
}

task<std::pair<int, int>> echo_over_loopback(int messages) {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto [served, intact] = co_await when_all(echo_messages(&listener), send_messages(listener.local_address(), messages));
  co_return std::pair{served, intact};
}

}  // namespace

TEST_CASE("many messages go both ways over loopback and the stream ends cleanly", "[tcp]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  const auto fds_before = sluice::test::open_fd_count();
  const auto [served, intact] = sync_wait(echo_over_loopback(300), sluice::test::backend_options(kind));
  REQUIRE(served == 300);
  REQUIRE(intact == 300);
  REQUIRE(sluice::test::open_fd_count() == fds_before);
}

namespace {

// Receives everything until EOF and sends it back in chunks as it arrives.
task<std::size_t> echo_stream(tcp_listener* listener) {
  auto conn = (co_await listener->accept()).value();
  std::vector<std::byte> chunk(64 * 1024);
  std::size_t total = 0;
  for (;;) {
    const std::size_t n = (co_await conn.recv(chunk)).value();
    if (n == 0) break;
    (co_await conn.send_all(std::span(chunk).first(n))).value();
    total += n;
  }
  (co_await conn.shutdown()).value();
  co_return total;
}

task<std::size_t> send_then_shutdown(tcp_stream* conn, std::vector<std::byte> data, std::size_t* first_send) {
  // One plain send of everything: the socket buffer cannot take it all, so it is short.
  *first_send = (co_await conn->send(data)).value();
  (co_await conn->send_all(std::span<const std::byte>(data).subspan(*first_send))).value();
  (co_await conn->shutdown()).value();
  co_return data.size();
}

task<std::vector<std::byte>> receive_all(tcp_stream* conn, std::size_t expected) {
  std::vector<std::byte> got(expected + 1);
  std::size_t total = 0;
  for (;;) {
    const std::size_t n = (co_await conn->recv(std::span(got).subspan(total))).value();
    if (n == 0) break;
    total += n;
  }
  got.resize(total);
  co_return got;
}

struct big_echo {
  std::size_t served;
  std::size_t first_send;
  std::vector<std::byte> received;
};

task<big_echo> echo_large_payload(std::vector<std::byte> payload) {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  big_echo out{};
  auto [served, sent, received] =
      co_await when_all(echo_stream(&listener), send_then_shutdown(&client, payload, &out.first_send),
                        receive_all(&client, payload.size()));
  out.served = served;
  out.received = std::move(received);
  (void)sent;
  co_return out;
}

}  // namespace

TEST_CASE("a large payload that forces short sends is echoed intact", "[tcp]") {
  const auto payload = pattern(16 << 20, 3);
  const auto out = sync_wait(echo_large_payload(payload));
  REQUIRE(out.first_send > 0);
  REQUIRE(out.first_send < payload.size());  // a real short send happened
  REQUIRE(out.served == payload.size());
  REQUIRE(out.received == payload);
}

TEST_CASE("send_all and recv_exact loop over sends and receives truncated by the test backend", "[tcp][faults]") {
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  int sends = 0;
  int recvs = 0;
  backend->add_fault([&sends, &recvs](const io_op& op) -> std::optional<std::int32_t> {
    if (op.code == op_code::send) {
      ++sends;
      return 700;
    }
    if (op.code == op_code::recv) {
      ++recvs;
      return 300;
    }
    return std::nullopt;
  });
  const auto payload = pattern(200'000, 5);
  const auto out = sync_wait(echo_large_payload(payload), std::move(options));
  REQUIRE(out.first_send == 700);
  REQUIRE(out.received == payload);
  REQUIRE(sends >= 2 * 200'000 / 700);
  REQUIRE(recvs >= 2 * 200'000 / 300);
}

namespace {

struct reset_outcome {
  std::string peer;
  result<std::size_t> recv;
  result<void> send;
};

// The server side aborts the connection (SO_LINGER 0, then close() or destruction: an RST).
task<reset_outcome> recv_and_send_after_reset(bool explicit_close) {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  {
    auto server = (co_await listener.accept()).value();
    const linger abort_on_close{1, 0};
    REQUIRE(::setsockopt(server.fd(), SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close) == 0);
    if (explicit_close) (co_await server.close()).value();
  }
  std::vector<std::byte> buf(100);
  auto r = co_await client.recv(buf);
  const auto data = pattern(1 << 20, 1);
  auto s = co_await client.send_all(data);
  co_return reset_outcome{client.peer().to_string(), std::move(r), std::move(s)};
}

}  // namespace

TEST_CASE("a peer that resets the connection gives ECONNRESET and EPIPE errors, not a crash", "[tcp]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  const bool explicit_close = GENERATE(false, true);
  INFO("backend: " << to_string(kind) << (explicit_close ? ", server calls close()" : ", server is destroyed"));
  const auto out = sync_wait(recv_and_send_after_reset(explicit_close), sluice::test::backend_options(kind));
  REQUIRE_FALSE(out.recv.ok());
  REQUIRE(out.recv.error().code() == std::errc::connection_reset);
  REQUIRE(out.recv.error().message() == "recv from " + out.peer + ": Connection reset by peer");
  REQUIRE_FALSE(out.send.ok());
  REQUIRE(out.send.error().code() == std::errc::broken_pipe);  // MSG_NOSIGNAL: an error, not SIGPIPE
  REQUIRE(out.send.error().message() == "send to " + out.peer + ": Broken pipe");
}

namespace {
task<std::pair<std::string, result<std::size_t>>> recv_with_injected_reset(test_backend* backend) {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  auto server = (co_await listener.accept()).value();
  const int fd = client.fd();
  backend->add_fault([fd](const io_op& op) -> std::optional<std::int32_t> {
    if (op.code == op_code::recv && op.fd == fd) return -ECONNRESET;
    return std::nullopt;
  });
  (co_await server.send_all(pattern(10, 1))).value();
  std::vector<std::byte> buf(10);
  auto r = co_await client.recv(buf);
  co_return std::pair{client.peer().to_string(), std::move(r)};
}
}  // namespace

TEST_CASE("an ECONNRESET injected on recv yields an error naming the peer", "[tcp][faults]") {
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  const auto [peer, r] = sync_wait(recv_with_injected_reset(backend), std::move(options));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().code() == std::errc::connection_reset);
  REQUIRE(r.error().message() == "recv from " + peer + ": Connection reset by peer");
}

namespace {
task<result<tcp_stream>> connect_task(address a) { co_return co_await tcp_stream::connect(a); }
}  // namespace

TEST_CASE("connecting to a closed port is refused, naming the address, and leaks no socket", "[tcp]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  address closed;
  {
    auto listener = tcp_listener::listen(address::loopback_v4()).value();
    closed = listener.local_address();
  }
  const auto fds_before = sluice::test::open_fd_count();
  const auto r = sync_wait(connect_task(closed), sluice::test::backend_options(kind));
  REQUIRE(sluice::test::open_fd_count() == fds_before);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().code() == std::errc::connection_refused);
  REQUIRE(r.error().message() == "connect " + closed.to_string() + ": Connection refused");
}

TEST_CASE("listening on a port in use names the address", "[tcp]") {
  auto first = tcp_listener::listen(address::loopback_v4()).value();
  const auto second = tcp_listener::listen(first.local_address());
  REQUIRE_FALSE(second.ok());
  REQUIRE(second.error().code() == std::errc::address_in_use);
  REQUIRE(second.error().message() == "bind " + first.local_address().to_string() + ": Address already in use");
  REQUIRE(first.local_address().port() != 0);  // the kernel chose a port
}

namespace {
struct endpoints {
  address listener_local, client_peer, client_local, server_peer;
};
task<endpoints> connect_pair(address where) {
  auto listener = tcp_listener::listen(where).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  auto server = (co_await listener.accept()).value();
  co_return endpoints{listener.local_address(), client.peer(), client.local_address().value(), server.peer()};
}
}  // namespace

TEST_CASE("both ends know each other's address, over IPv4 and IPv6", "[tcp]") {
  const auto where = GENERATE(address::loopback_v4(), address::loopback_v6());
  INFO("listening on " << where.to_string());
  const auto e = sync_wait(connect_pair(where));
  REQUIRE(e.client_peer == e.listener_local);
  REQUIRE(e.server_peer == e.client_local);
  REQUIRE(e.client_local.family() == where.family());
}

namespace {
struct closed_stream_use {
  std::string peer;
  result<std::size_t> recv;
  result<void> send;
  result<void> nodelay;
  result<void> close_again;
};
task<closed_stream_use> use_closed_stream() {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  (co_await client.close()).value();
  std::vector<std::byte> buf(4);
  auto r = co_await client.recv(buf);
  auto s = co_await client.send_all(buf);
  auto n = client.set_nodelay(true);
  auto c = co_await client.close();
  co_return closed_stream_use{client.peer().to_string(), std::move(r), std::move(s), std::move(n), std::move(c)};
}
}  // namespace

TEST_CASE("a closed stream reports EBADF naming the peer, and closes twice safely", "[tcp]") {
  const auto use = sync_wait(use_closed_stream());
  REQUIRE(use.recv.error().code() == std::errc::bad_file_descriptor);
  REQUIRE(use.recv.error().message() == "recv from " + use.peer + ": Bad file descriptor (already closed)");
  REQUIRE(use.send.error().message() == "send to " + use.peer + ": Bad file descriptor (already closed)");
  REQUIRE(use.nodelay.error().code() == std::errc::bad_file_descriptor);
  REQUIRE(use.close_again.ok());
}

namespace {
// The peer sends 3 bytes and closes; a recv_exact of 8 then fails, and the next one sees a clean end.
task<std::pair<result<std::size_t>, std::string>> recv_exact_cut_short() {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  {
    auto server = (co_await listener.accept()).value();
    (co_await server.send_all(pattern(3, 9))).value();
    (co_await server.close()).value();
  }
  std::vector<std::byte> buf(8);
  auto r = co_await client.recv_exact(buf);
  co_return std::pair{std::move(r), client.peer().to_string()};
}
}  // namespace

TEST_CASE("recv_exact fails with unexpected_eof when the stream ends in the middle", "[tcp]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  const auto [r, peer] = sync_wait(recv_exact_cut_short(), sluice::test::backend_options(kind));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().code() == errc::unexpected_eof);
  REQUIRE(r.error().message() == "recv from " + peer + " (after 3 of 8 bytes): unexpected end of stream");
}

namespace {
int int_option(int fd, int level, int name) {
  int v = -1;
  socklen_t size = sizeof v;
  return ::getsockopt(fd, level, name, &v, &size) == 0 ? v : -1;
}

struct dead_peer_options {
  int keepalive = -1, idle = -1, interval = -1, user_timeout = -1, untouched_keepalive = -1;
};

task<dead_peer_options> set_and_read_dead_peer_timeout() {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  auto server = (co_await listener.accept()).value();
  client.set_dead_peer_timeout(std::chrono::milliseconds(6000)).value();
  server.set_dead_peer_timeout(std::chrono::milliseconds(0)).value();  // 0: left to TCP
  dead_peer_options o;
  o.keepalive = int_option(client.fd(), SOL_SOCKET, SO_KEEPALIVE);
  o.idle = int_option(client.fd(), IPPROTO_TCP, TCP_KEEPIDLE);
  o.interval = int_option(client.fd(), IPPROTO_TCP, TCP_KEEPINTVL);
  o.user_timeout = int_option(client.fd(), IPPROTO_TCP, TCP_USER_TIMEOUT);
  o.untouched_keepalive = int_option(server.fd(), SOL_SOCKET, SO_KEEPALIVE);
  (co_await client.close()).value();
  (co_await server.close()).value();
  co_return o;
}
}  // namespace

// (That a silent peer then ends the connection is tests/apps/cluster_netns_test.cpp's: a silent
// path needs two network namespaces.)
TEST_CASE("set_dead_peer_timeout sets TCP_USER_TIMEOUT and keepalive probes every quarter of it", "[tcp]") {
  const dead_peer_options o = sync_wait(set_and_read_dead_peer_timeout());
  CHECK(o.keepalive == 1);
  CHECK(o.idle == 1);  // 6 s / 4, in whole seconds
  CHECK(o.interval == 1);
  CHECK(o.user_timeout == 6000);
  CHECK(o.untouched_keepalive == 0);
}
