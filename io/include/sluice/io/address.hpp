#pragma once
// address: an IPv4 or IPv6 socket address (host and port), parsed from text without any DNS lookup.
//
// Accepted: "1.2.3.4:80", "[::1]:80", "localhost:80" (127.0.0.1), port 0 (the kernel chooses).
// Anything else is an error that says what is wrong: a missing or bad port, a bad host, an IPv6
// address without brackets, or a hostname ("hostnames other than localhost are not resolved; use
// a numeric address").
//
//   address a = address::parse("127.0.0.1:0").value();
//   auto listener = tcp_listener::listen(a).value();

#include <sluice/io/result.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::io {

class address {
 public:
  // Unspecified (AF_UNSPEC): what a default-constructed or moved-from owner reports.
  address() noexcept = default;

  static result<address> parse(std::string_view text);
  static address loopback_v4(std::uint16_t port = 0) noexcept;
  static address loopback_v6(std::uint16_t port = 0) noexcept;
  static address any_v4(std::uint16_t port = 0) noexcept;
  // From a kernel-filled sockaddr (accept, getsockname). Families other than IPv4/IPv6 give an
  // unspecified address.
  static address from_sockaddr(const sockaddr* sa, socklen_t size) noexcept;

  // "1.2.3.4:80", "[::1]:80", or "<unspecified>".
  std::string to_string() const;
  std::uint16_t port() const noexcept;
  address with_port(std::uint16_t port) const noexcept;
  // AF_INET, AF_INET6 or AF_UNSPEC.
  int family() const noexcept { return storage_.ss_family; }
  const sockaddr* data() const noexcept { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t size() const noexcept { return size_; }

  friend bool operator==(const address& a, const address& b) noexcept;

 private:
  sockaddr_storage storage_{};
  socklen_t size_ = 0;
};

}  // namespace sluice::io
