#pragma once
// address: an IPv4 or IPv6 socket address (host and port), parsed from text without any DNS lookup,
// or a Unix-domain socket's path.
//
// Accepted: "1.2.3.4:80", "[::1]:80", "localhost:80" (127.0.0.1), port 0 (the kernel chooses), and
// "unix:/run/x.sock" (a pathname Unix socket; unix_path makes one from a path). Anything else is an
// error that says what is wrong: a missing or bad port, a bad host, an IPv6 address without
// brackets, a hostname ("hostnames other than localhost are not resolved; use a numeric address"),
// or a Unix path that is empty, holds a NUL byte or is too long for sockaddr_un.
//
// A Unix address has no port (port() is 0, with_port changes nothing). Pathname sockets reach the
// same socket from every network namespace that sees the file, which loopback TCP does not.
//
//   address a = address::parse("127.0.0.1:0").value();
//   auto listener = tcp_listener::listen(a).value();

#include <sluice/io/result.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

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
  // A pathname Unix-domain socket (relative paths resolve against the current directory when the
  // socket is used). The path must be non-empty, without NUL bytes, and shorter than 108 bytes.
  static result<address> unix_path(std::string_view path);
  // From a kernel-filled sockaddr (accept, getsockname). Families other than IPv4, IPv6 and Unix
  // give an unspecified address.
  static address from_sockaddr(const sockaddr* sa, socklen_t size) noexcept;

  // "1.2.3.4:80", "[::1]:80", "unix:/run/x.sock", "unix:<unnamed>" (the peer address an accepted
  // Unix connection has), or "<unspecified>".
  std::string to_string() const;
  std::uint16_t port() const noexcept;
  address with_port(std::uint16_t port) const noexcept;
  // A Unix address's path ("" when unnamed); "" for other families.
  std::string path() const;
  // AF_INET, AF_INET6, AF_UNIX or AF_UNSPEC.
  int family() const noexcept { return storage_.ss_family; }
  const sockaddr* data() const noexcept { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t size() const noexcept { return size_; }

  friend bool operator==(const address& a, const address& b) noexcept;

 private:
  sockaddr_storage storage_{};
  socklen_t size_ = 0;
};

}  // namespace sluice::io
