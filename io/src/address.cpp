// Address parsing and formatting (see address.hpp). No DNS: only numeric hosts and "localhost".

#include <sluice/io/address.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace sluice::io {

namespace {

constexpr std::string_view example = " (expected host:port, as in 127.0.0.1:8080 or [::1]:8080)";
constexpr std::string_view unix_prefix = "unix:";
constexpr std::size_t unix_path_offset = offsetof(sockaddr_un, sun_path);

error parse_error(std::string_view text, std::string_view why) {
  std::string message = "parse address '";
  message += text;
  message += "': ";
  message += why;
  return error(std::make_error_code(std::errc::invalid_argument), std::move(message));
}

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    return lower(x) == lower(y);
  });
}

// Decimal 0..65535; anything else (sign, space, hex, overflow) is a bad port.
bool parse_port(std::string_view text, std::uint16_t& port) noexcept {
  if (text.empty() || text.size() > 5) return false;
  unsigned value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > 65535) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

std::string port_problem(std::string_view port_text) {
  const bool digits = !port_text.empty() && std::all_of(port_text.begin(), port_text.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  std::string why = "bad port '";
  why += port_text;
  why += digits ? "': out of range (0-65535)" : "': not a decimal number";
  return why;
}

// Why `path` cannot name a pathname Unix socket, or "" when it can.
std::string unix_path_problem(std::string_view path) {
  if (path.empty()) return "is empty";
  if (path.find('\0') != std::string_view::npos) return "holds a NUL byte";
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return "is too long (" + std::to_string(path.size()) + " bytes; at most " +
           std::to_string(sizeof(sockaddr_un::sun_path) - 1) + ")";
  }
  return {};
}

address make_v4(in_addr_t host_order, std::uint16_t port) noexcept {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(host_order);
  return address::from_sockaddr(reinterpret_cast<const sockaddr*>(&sin), sizeof sin);
}

}  // namespace

result<address> address::parse(std::string_view text) {
  if (text.empty()) return parse_error(text, std::string("empty") + std::string(example));
  if (text.substr(0, unix_prefix.size()) == unix_prefix) {
    const std::string_view path = text.substr(unix_prefix.size());
    if (std::string why = unix_path_problem(path); !why.empty()) return parse_error(text, "the unix socket path " + why);
    return unix_path(path);
  }

  std::string_view host;
  std::string_view port_text;
  bool bracketed = false;
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return parse_error(text, "missing ']' after the IPv6 address");
    host = text.substr(1, close - 1);
    bracketed = true;
    const std::string_view rest = text.substr(close + 1);
    if (rest.empty()) return parse_error(text, std::string("missing port") + std::string(example));
    if (rest.front() != ':') return parse_error(text, "expected ':' and a port after ']'");
    port_text = rest.substr(1);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return parse_error(text, std::string("missing port") + std::string(example));
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return parse_error(text, "an IPv6 address needs brackets, as in [::1]:8080");
    }
  }
  if (port_text.empty()) return parse_error(text, std::string("missing port after ':'") + std::string(example));
  std::uint16_t port = 0;
  if (!parse_port(port_text, port)) return parse_error(text, port_problem(port_text));
  if (host.empty()) return parse_error(text, "missing host (use 0.0.0.0 or [::] for every interface)");

  const std::string host_z(host);  // inet_pton wants a terminated string
  if (bracketed) {
    sockaddr_in6 sin6{};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(port);
    if (::inet_pton(AF_INET6, host_z.c_str(), &sin6.sin6_addr) != 1) {
      return parse_error(text, "bad IPv6 address '" + host_z + "'");
    }
    return from_sockaddr(reinterpret_cast<const sockaddr*>(&sin6), sizeof sin6);
  }
  if (equals_ignoring_case(host, "localhost")) return make_v4(INADDR_LOOPBACK, port);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  if (::inet_pton(AF_INET, host_z.c_str(), &sin.sin_addr) == 1) {
    return from_sockaddr(reinterpret_cast<const sockaddr*>(&sin), sizeof sin);
  }
  const bool numeric = std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
  if (numeric) return parse_error(text, "bad IPv4 address '" + host_z + "'");
  return parse_error(text, "bad host '" + host_z + "': hostnames other than localhost are not resolved; use a numeric address");
}

address address::loopback_v4(std::uint16_t port) noexcept { return make_v4(INADDR_LOOPBACK, port); }

address address::any_v4(std::uint16_t port) noexcept { return make_v4(INADDR_ANY, port); }

address address::loopback_v6(std::uint16_t port) noexcept {
  sockaddr_in6 sin6{};
  sin6.sin6_family = AF_INET6;
  sin6.sin6_port = htons(port);
  sin6.sin6_addr = in6addr_loopback;
  return from_sockaddr(reinterpret_cast<const sockaddr*>(&sin6), sizeof sin6);
}

result<address> address::unix_path(std::string_view path) {
  if (std::string why = unix_path_problem(path); !why.empty()) {
    std::string message = "unix socket path '";
    message.append(path.substr(0, std::min<std::size_t>(path.size(), 200))).append("' ").append(why);
    return error(std::make_error_code(std::errc::invalid_argument), std::move(message));
  }
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  std::memcpy(sun.sun_path, path.data(), path.size());
  return from_sockaddr(reinterpret_cast<const sockaddr*>(&sun),
                       static_cast<socklen_t>(unix_path_offset + path.size() + 1));
}

address address::from_sockaddr(const sockaddr* sa, socklen_t size) noexcept {
  address a;
  if (sa == nullptr) return a;
  if (sa->sa_family == AF_INET && size >= sizeof(sockaddr_in)) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in));
    a.size_ = sizeof(sockaddr_in);
  } else if (sa->sa_family == AF_INET6 && size >= sizeof(sockaddr_in6)) {
    std::memcpy(&a.storage_, sa, sizeof(sockaddr_in6));
    a.size_ = sizeof(sockaddr_in6);
  } else if (sa->sa_family == AF_UNIX && size >= sizeof(sa_family_t)) {
    const socklen_t kept = std::min<socklen_t>(size, sizeof(sockaddr_un));
    std::memcpy(&a.storage_, sa, kept);
    a.size_ = kept;
  }
  return a;
}

std::uint16_t address::port() const noexcept {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

std::string address::path() const {
  if (family() != AF_UNIX || size_ <= unix_path_offset) return {};
  const char* p = reinterpret_cast<const sockaddr_un*>(&storage_)->sun_path;
  // The kernel may or may not count a terminating NUL in the size.
  return std::string(p, ::strnlen(p, size_ - unix_path_offset));
}

address address::with_port(std::uint16_t port) const noexcept {
  address a = *this;
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&a.storage_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&a.storage_)->sin6_port = htons(port);
  return a;
}

std::string address::to_string() const {
  // Built by appending: GCC 12 at -O3 warns (-Wrestrict, falsely) on "[" + std::string(...).
  char host[INET6_ADDRSTRLEN] = {};
  std::string out;
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, host, sizeof host);
    out.append(host);
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, host, sizeof host);
    out.append("[").append(host).append("]");
  } else if (family() == AF_UNIX) {
    const std::string p = path();
    out.append(unix_prefix).append(p.empty() ? std::string("<unnamed>") : p);
    return out;
  } else {
    return "<unspecified>";
  }
  out.append(":").append(std::to_string(port()));
  return out;
}

bool operator==(const address& a, const address& b) noexcept {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&b.storage_);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.family() == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a.storage_);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b.storage_);
    return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
           std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
  }
  if (a.family() == AF_UNIX) return a.path() == b.path();
  return true;  // both unspecified
}

}  // namespace sluice::io
