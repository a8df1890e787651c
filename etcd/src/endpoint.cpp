// Parsing an etcd endpoint (see endpoint.hpp).

#include <sluice/etcd/endpoint.hpp>

#include <system_error>

namespace sluice::etcd {

namespace {

constexpr std::string_view http_scheme = "http://";
constexpr std::string_view unix_scheme = "unix://";

io::error refuse(std::string_view text, std::string_view why) {
  std::string message = "etcd endpoint '";
  message.append(text).append("': ").append(why);
  message.append(" (expected http://HOST:PORT or unix:///PATH)");
  return io::error(std::make_error_code(std::errc::invalid_argument), std::move(message));
}

bool starts_with(std::string_view text, std::string_view prefix) noexcept {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

io::result<endpoint> endpoint::parse(std::string_view text) {
  std::string_view trimmed = text;
  if (trimmed.size() > 1 && trimmed.back() == '/' && !starts_with(trimmed, unix_scheme)) trimmed.remove_suffix(1);
  if (starts_with(trimmed, http_scheme)) {
    const std::string_view hostport = trimmed.substr(http_scheme.size());
    if (hostport.find('/') != std::string_view::npos) return refuse(text, "a path after the port");
    auto address = io::address::parse(hostport);
    if (!address) return refuse(text, address.error().message());
    return endpoint{std::string(trimmed), *address, std::string(hostport)};
  }
  if (starts_with(trimmed, unix_scheme)) {
    const std::string_view path = trimmed.substr(unix_scheme.size());
    if (path.empty()) return refuse(text, "no socket path");
    if (path.front() != '/') return refuse(text, "the socket path must be absolute (unix:///PATH)");
    auto address = io::address::unix_path(path);
    if (!address) return refuse(text, address.error().message());
    return endpoint{std::string(trimmed), *address, "localhost"};
  }
  if (starts_with(trimmed, "https://") || starts_with(trimmed, "unixs://")) return refuse(text, "TLS is not supported");
  return refuse(text, "unknown scheme");
}

}  // namespace sluice::etcd
