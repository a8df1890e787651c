#include <sluice/io/address.hpp>

#include <catch2/catch.hpp>

#include <string>

using sluice::io::address;

TEST_CASE("valid addresses parse to the expected family, port and text", "[address]") {
  struct row {
    const char* text;
    int family;
    unsigned port;
    const char* canonical;
  };
  const row rows[] = {
      {"1.2.3.4:80", AF_INET, 80, "1.2.3.4:80"},
      {"127.0.0.1:0", AF_INET, 0, "127.0.0.1:0"},
      {"0.0.0.0:65535", AF_INET, 65535, "0.0.0.0:65535"},
      {"localhost:8080", AF_INET, 8080, "127.0.0.1:8080"},
      {"LocalHost:1", AF_INET, 1, "127.0.0.1:1"},
      {"[::1]:80", AF_INET6, 80, "[::1]:80"},
      {"[::]:0", AF_INET6, 0, "[::]:0"},
      {"[2001:DB8::1]:443", AF_INET6, 443, "[2001:db8::1]:443"},
      {"[::ffff:1.2.3.4]:9", AF_INET6, 9, "[::ffff:1.2.3.4]:9"},
      {"10.0.0.1:007", AF_INET, 7, "10.0.0.1:7"},
  };
  for (const auto& r : rows) {
    INFO("parsing " << r.text);
    const auto parsed = address::parse(r.text);
    REQUIRE(parsed.ok());
    CHECK(parsed->family() == r.family);
    CHECK(parsed->port() == r.port);
    CHECK(parsed->to_string() == r.canonical);
    CHECK(parsed->size() == (r.family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)));
    CHECK(address::parse(parsed->to_string()).value() == *parsed);  // text round trip
  }
}

TEST_CASE("invalid addresses are refused with a message that says what is wrong", "[address]") {
  struct row {
    const char* text;
    const char* why;  // the message after "parse address '<text>': "
  };
  const std::string example = " (expected host:port, as in 127.0.0.1:8080 or [::1]:8080)";
  const row rows[] = {
      {"127.0.0.1", "missing port"},
      {"127.0.0.1:", "missing port after ':'"},
      {"[::1]", "missing port"},
      {"127.0.0.1:http", "bad port 'http': not a decimal number"},
      {"127.0.0.1:-1", "bad port '-1': not a decimal number"},
      {"127.0.0.1: 80", "bad port ' 80': not a decimal number"},
      {"127.0.0.1:65536", "bad port '65536': out of range (0-65535)"},
      {"127.0.0.1:123456", "bad port '123456': out of range (0-65535)"},
      {":80", "missing host (use 0.0.0.0 or [::] for every interface)"},
      {"1.2.3.256:80", "bad IPv4 address '1.2.3.256'"},
      {"1.2.3:80", "bad IPv4 address '1.2.3'"},
      {"example.com:80", "bad host 'example.com': hostnames other than localhost are not resolved; use a numeric address"},
      {"::1:80", "an IPv6 address needs brackets, as in [::1]:8080"},
      {"2001:db8::1:443", "an IPv6 address needs brackets, as in [::1]:8080"},
      {"[::1:80", "missing ']' after the IPv6 address"},
      {"[::1]80", "expected ':' and a port after ']'"},
      {"[zz::1]:80", "bad IPv6 address 'zz::1'"},
      {"[1.2.3.4]:80", "bad IPv6 address '1.2.3.4'"},
  };
  for (const auto& r : rows) {
    INFO("parsing " << r.text);
    const auto parsed = address::parse(r.text);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().code() == std::errc::invalid_argument);
    std::string expected = std::string("parse address '") + r.text + "': " + r.why;
    if (std::string(r.why) == "missing port" || std::string(r.why) == "missing port after ':'") expected += example;
    CHECK(parsed.error().message() == expected);
  }
  REQUIRE(address::parse("").error().message() == "parse address '': empty" + example);
}

TEST_CASE("address::parse(...).value() throws an io_exception carrying the message", "[address]") {
  REQUIRE_THROWS_WITH(address::parse("localhost").value(),
                      "parse address 'localhost': missing port (expected host:port, as in 127.0.0.1:8080 or [::1]:8080)");
}

TEST_CASE("addresses compare by family, host and port", "[address]") {
  REQUIRE(address::parse("localhost:80").value() == address::loopback_v4(80));
  REQUIRE(address::parse("[::1]:80").value() == address::loopback_v6(80));
  REQUIRE(address::parse("0.0.0.0:5").value() == address::any_v4(5));
  REQUIRE_FALSE(address::loopback_v4(80) == address::loopback_v4(81));
  REQUIRE_FALSE(address::loopback_v4(80) == address::loopback_v6(80));
  REQUIRE(address::loopback_v4(80).with_port(81) == address::loopback_v4(81));
  REQUIRE(address{} == address{});
  REQUIRE(address{}.family() == AF_UNSPEC);
  REQUIRE(address{}.to_string() == "<unspecified>");
  REQUIRE(address{}.port() == 0);
}
