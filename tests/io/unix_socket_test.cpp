// Unix-domain stream sockets through tcp_stream/tcp_listener, their addresses, and try_peek.

#include <sluice/io/address.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>
#include <support/fd_count.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::io;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::runtime::when_all;
using sluice::test::backend_kind;
using sluice::test::temp_dir;

namespace {

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

bool is_socket_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

TEST_CASE("a unix address holds its path, prints as unix:PATH and parses back", "[address][unix]") {
  const auto a = address::unix_path("/tmp/some dir/x.sock").value();
  CHECK(a.family() == AF_UNIX);
  CHECK(a.path() == "/tmp/some dir/x.sock");
  CHECK(a.port() == 0);
  CHECK(a.with_port(80) == a);
  CHECK(a.to_string() == "unix:/tmp/some dir/x.sock");
  CHECK(address::parse(a.to_string()).value() == a);
  CHECK(address::parse("unix:rel/y.sock").value().path() == "rel/y.sock");  // relative paths are kept
  CHECK(a.size() == offsetof(sockaddr_un, sun_path) + a.path().size() + 1);
  CHECK_FALSE(a == address::unix_path("/tmp/some dir/y.sock").value());
  CHECK_FALSE(a == address::loopback_v4());
  const std::string longest(107, 'p');
  CHECK(address::unix_path(longest).value().path() == longest);
}

TEST_CASE("bad unix socket paths are refused with a message that says why", "[address][unix]") {
  CHECK(address::unix_path("").error().message() == "unix socket path '' is empty");
  CHECK(address::unix_path(std::string("a\0b", 3)).error().message() == std::string("unix socket path 'a\0b' holds a NUL byte", 39));
  const std::string too_long(108, 'p');
  const auto refused = address::unix_path(too_long);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == std::errc::invalid_argument);
  CHECK(refused.error().message() == "unix socket path '" + too_long + "' is too long (108 bytes; at most 107)");
  CHECK(address::parse("unix:").error().message() == "parse address 'unix:': the unix socket path is empty");
  CHECK(address::parse("unix:" + too_long).error().message() ==
        "parse address 'unix:" + too_long + "': the unix socket path is too long (108 bytes; at most 107)");
}

TEST_CASE("an unnamed unix peer (what accept reports) prints as unix:<unnamed>", "[address][unix]") {
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  const auto a = address::from_sockaddr(reinterpret_cast<const sockaddr*>(&sun), sizeof(sa_family_t));
  CHECK(a.family() == AF_UNIX);
  CHECK(a.path().empty());
  CHECK(a.to_string() == "unix:<unnamed>");
}

namespace {

struct unix_echo {
  std::string listener_address;
  std::string accepted_peer;
  std::string client_peer;
  bool nodelay_ok = false;
  std::string echoed;
  std::size_t end_of_stream = 1;
};

task<std::string> echo_once(tcp_listener* listener, std::string* accepted_peer) {
  auto conn = (co_await listener->accept()).value();
  *accepted_peer = conn.peer().to_string();
  std::string got(64, '\0');
  const std::size_t n = (co_await conn.recv(std::as_writable_bytes(std::span(got)))).value();
  got.resize(n);
  (co_await conn.send_all(bytes_of(got))).value();
  (co_await conn.close()).value();
  co_return got;
}

task<std::string> ask(address server, unix_echo* out) {
  auto conn = (co_await tcp_stream::connect(server)).value();
  out->client_peer = conn.peer().to_string();
  out->nodelay_ok = conn.set_nodelay(true).ok();
  (co_await conn.send_all(bytes_of("over a unix socket"))).value();
  std::string back(18, '\0');
  (co_await conn.recv_exact(std::as_writable_bytes(std::span(back)))).value();
  std::byte end{};
  out->end_of_stream = (co_await conn.recv(std::span(&end, 1))).value();
  (co_await conn.close()).value();
  co_return back;
}

task<unix_echo> echo_over_unix(std::string path) {
  auto listener = tcp_listener::listen(address::unix_path(path).value()).value();
  unix_echo out;
  out.listener_address = listener.local_address().to_string();
  auto [served, back] = co_await when_all(echo_once(&listener, &out.accepted_peer), ask(listener.local_address(), &out));
  out.echoed = back;
  (co_await listener.close()).value();
  (void)served;
  co_return out;
}

}  // namespace

TEST_CASE("a message goes both ways over a unix socket and the socket file stays for its owner", "[tcp][unix]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  const std::string path = dir.file("echo.sock");
  const auto fds_before = sluice::test::open_fd_count();
  const auto out = sync_wait(echo_over_unix(path), sluice::test::backend_options(kind));
  CHECK(out.listener_address == "unix:" + path);
  CHECK(out.client_peer == "unix:" + path);
  CHECK(out.accepted_peer == "unix:<unnamed>");
  CHECK(out.nodelay_ok);  // a no-op on a unix socket, not an error
  CHECK(out.echoed == "over a unix socket");
  CHECK(out.end_of_stream == 0);
  CHECK(sluice::test::open_fd_count() == fds_before);
  CHECK(is_socket_file(path));  // close leaves the file: whoever chose the path removes it
}

namespace {

task<result<tcp_stream>> connect_to(address a) { co_return co_await tcp_stream::connect(a); }

}  // namespace

TEST_CASE("connecting to a missing unix socket, or listening on a taken path, fails naming the path", "[tcp][unix]") {
  temp_dir dir;
  const std::string missing = dir.file("missing.sock");
  const auto refused = sync_wait(connect_to(address::unix_path(missing).value()));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == std::errc::no_such_file_or_directory);
  CHECK(refused.error().message() == "connect unix:" + missing + ": No such file or directory");

  const std::string taken = dir.file("taken.sock");
  auto first = tcp_listener::listen(address::unix_path(taken).value());
  REQUIRE(first.ok());
  const auto second = tcp_listener::listen(address::unix_path(taken).value());
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().code() == std::errc::address_in_use);
  CHECK(second.error().message() == "bind unix:" + taken + ": Address already in use");

  // A socket file nobody listens on any more: connect is refused, not hung.
  first = tcp_listener{};
  const auto stale = sync_wait(connect_to(address::unix_path(taken).value()));
  REQUIRE_FALSE(stale.ok());
  CHECK(stale.error().code() == std::errc::connection_refused);
}

namespace {

struct peek_outcome {
  std::optional<std::size_t> before_data;
  std::optional<std::size_t> with_data;
  std::string peeked;
  std::string received;
  std::optional<std::size_t> after_close;
  std::string empty_buffer_error;
};

task<peek_outcome> peek_scenario(address local) {
  auto listener = tcp_listener::listen(local).value();
  auto [client, server] = co_await when_all(tcp_stream::connect(listener.local_address()), listener.accept());
  auto c = std::move(client).value();
  auto s = std::move(server).value();
  peek_outcome out;
  std::string buf(16, '\0');
  auto into = std::as_writable_bytes(std::span(buf));
  out.before_data = (co_await c.try_peek(into)).value();  // nothing yet: never waits
  (co_await s.send_all(bytes_of("hello"))).value();
  for (int i = 0; i < 1000 && !out.with_data; ++i) out.with_data = (co_await c.try_peek(into)).value();
  out.peeked = buf.substr(0, out.with_data.value_or(0));
  std::string got(5, '\0');
  (co_await c.recv_exact(std::as_writable_bytes(std::span(got)))).value();  // the peek consumed nothing
  out.received = got;
  (co_await s.close()).value();
  for (int i = 0; i < 1000 && !out.after_close; ++i) out.after_close = (co_await c.try_peek(into)).value();
  auto empty = co_await c.try_peek({});
  if (!empty) out.empty_buffer_error = empty.error().message();
  (co_await c.close()).value();
  (co_await listener.close()).value();
  co_return out;
}

}  // namespace

TEST_CASE("try_peek tells nothing-yet from bytes waiting from the peer's end, without waiting or consuming", "[tcp][unix]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  const bool unix_socket = GENERATE(false, true);
  INFO("backend: " << to_string(kind) << (unix_socket ? ", unix socket" : ", tcp"));
  temp_dir dir;
  const address local = unix_socket ? address::unix_path(dir.file("peek.sock")).value() : address::loopback_v4();
  const auto out = sync_wait(peek_scenario(local), sluice::test::backend_options(kind));
  CHECK_FALSE(out.before_data.has_value());
  REQUIRE(out.with_data.has_value());
  CHECK(*out.with_data == 5);
  CHECK(out.peeked == "hello");
  CHECK(out.received == "hello");
  REQUIRE(out.after_close.has_value());
  CHECK(*out.after_close == 0);
  CHECK(out.empty_buffer_error.find("with an empty buffer: Invalid argument") != std::string::npos);
}
