#pragma once
// endpoint: where an etcd server's client URL listens, parsed from text.
//
// Accepted: "http://HOST:PORT" (a numeric IPv4/IPv6 host or localhost, as io::address takes it;
// a trailing "/" is allowed) and "unix:///ABSOLUTE/PATH" (a pathname Unix socket, which reaches the
// server from any network namespace that sees the file). Refused with a message that says why:
// https (no TLS here), a hostname, a missing port, a relative or empty unix path.
//
// etcd 3.4 spells a Unix listener "unix://NAME:PORT" and creates the socket file "NAME:PORT"
// relative to its working directory (its URLs cannot hold a path); the client names that file by
// its absolute path: etcd run in /run/job with --listen-client-urls unix://client.sock:0 is reached
// at "unix:///run/job/client.sock:0".
//
//   auto where = etcd::endpoint::parse("unix:///run/job/client.sock:0").value();

#include <sluice/io/address.hpp>
#include <sluice/io/result.hpp>

#include <string>
#include <string_view>

namespace sluice::etcd {

struct endpoint {
  std::string text;      // as given (without a trailing "/"): what error messages name
  io::address address;   // IPv4, IPv6 or AF_UNIX
  std::string host;      // the HTTP Host header: "HOST:PORT", or "localhost" for a unix socket

  static io::result<endpoint> parse(std::string_view text);
};

}  // namespace sluice::etcd
