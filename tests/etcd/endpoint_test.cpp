// Parsing etcd endpoints, and the error categories' names.

#include <sluice/etcd/client.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace sluice;

TEST_CASE("http and unix endpoints parse to an address, a Host header and their text", "[etcd][endpoint]") {
  const auto tcp = etcd::endpoint::parse("http://127.0.0.1:2379").value();
  CHECK(tcp.text == "http://127.0.0.1:2379");
  CHECK(tcp.address == io::address::loopback_v4(2379));
  CHECK(tcp.host == "127.0.0.1:2379");
  CHECK(etcd::endpoint::parse("http://localhost:2379/").value().text == "http://localhost:2379");
  CHECK(etcd::endpoint::parse("http://[::1]:2379").value().address == io::address::loopback_v6(2379));

  const auto local = etcd::client::parse_endpoint("unix:///run/job/client.sock:0").value();
  CHECK(local.text == "unix:///run/job/client.sock:0");
  CHECK(local.address.family() == AF_UNIX);
  CHECK(local.address.path() == "/run/job/client.sock:0");  // etcd's "NAME:PORT" socket file
  CHECK(local.host == "localhost");
}

TEST_CASE("bad endpoints are refused with a message that says why", "[etcd][endpoint]") {
  struct row {
    const char* text;
    const char* why;
  };
  const row rows[] = {
      {"127.0.0.1:2379", "unknown scheme"},
      {"https://127.0.0.1:2379", "TLS is not supported"},
      {"unixs:///x.sock", "TLS is not supported"},
      {"http://127.0.0.1", "parse address '127.0.0.1': missing port"},
      {"http://etcd.example:2379", "hostnames other than localhost are not resolved"},
      {"http://127.0.0.1:2379/v3", "a path after the port"},
      {"unix://", "no socket path"},
      {"unix://relative.sock:0", "the socket path must be absolute (unix:///PATH)"},
      {"", "unknown scheme"},
  };
  for (const auto& r : rows) {
    INFO(r.text);
    const auto parsed = etcd::endpoint::parse(r.text);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().code() == std::errc::invalid_argument);
    const std::string& m = parsed.error().message();
    CHECK(m.rfind(std::string("etcd endpoint '") + r.text + "': ", 0) == 0);
    CHECK(m.find(r.why) != std::string::npos);
    CHECK(m.find("(expected http://HOST:PORT or unix:///PATH)") != std::string::npos);
  }
  const std::string long_path(200, 'p');
  CHECK(etcd::endpoint::parse("unix:///" + long_path).error().message().find("is too long") != std::string::npos);
}

TEST_CASE("error codes name themselves: etcd's own and the gateway's gRPC ones", "[etcd][endpoint]") {
  CHECK(std::error_code(etcd::errc::lease_expired).message() == "lease expired or unknown");
  CHECK(std::error_code(etcd::errc::compacted).category().name() == std::string("etcd"));
  CHECK(std::error_code(etcd::grpc_code::not_found).message() == "gRPC NOT_FOUND");
  CHECK(std::error_code(etcd::grpc_code::unauthenticated).message() == "gRPC UNAUTHENTICATED");
  CHECK(std::string(etcd::grpc_code_name(99)) == "(unknown code)");
  CHECK(std::error_code(etcd::grpc_code::not_found) != std::error_code(etcd::errc::compacted));
}
