// network: simulated TCP sockets, listeners and connections (see network.hpp).

#include <sluice/sim/network.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sluice::sim {

int network::open(int family) {
  const int id = next_id_++;
  sockets_[id].family = family;
  return id;
}

int network::port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

int network::find_listener(int family, int port) const {
  for (const auto& [id, s] : sockets_) {
    if (s.st == state::listening && s.family == family && port_of(s.local) == port && !s.listener_shut) return id;
  }
  return -1;
}

int network::bind(int id, const sockaddr* addr, socklen_t len) {
  socket& s = at(id);
  if (s.bound) return -EINVAL;
  if (addr->sa_family != s.family || len > sizeof(sockaddr_storage)) return -EAFNOSUPPORT;
  std::memcpy(&s.local, addr, len);
  s.local_len = len;
  int port = port_of(s.local);
  if (port == 0) {
    port = next_port_++;
    if (s.family == AF_INET) reinterpret_cast<sockaddr_in&>(s.local).sin_port = htons(static_cast<std::uint16_t>(port));
    if (s.family == AF_INET6) reinterpret_cast<sockaddr_in6&>(s.local).sin6_port = htons(static_cast<std::uint16_t>(port));
  } else {
    for (const auto& [other, o] : sockets_) {
      if (other != id && o.bound && o.st != state::closed && o.family == s.family && port_of(o.local) == port) {
        return -EADDRINUSE;
      }
    }
  }
  s.bound = true;
  return 0;
}

int network::listen(int id, int backlog) {
  socket& s = at(id);
  if (!s.bound) {
    sockaddr_storage any{};
    any.ss_family = static_cast<sa_family_t>(s.family);
    const int rc = bind(id, reinterpret_cast<sockaddr*>(&any),
                        s.family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    if (rc != 0) return rc;
  }
  s.st = state::listening;
  s.backlog_max = std::max(1, backlog);
  return 0;
}

int network::connect(int id, const sockaddr* addr, socklen_t len) {
  if (len > sizeof(sockaddr_storage)) return -EINVAL;
  sockaddr_storage target{};
  std::memcpy(&target, addr, len);
  socket& client = at(id);
  if (client.st != state::fresh) return client.st == state::connected ? -EISCONN : -EBADF;
  const int listener = find_listener(addr->sa_family, port_of(target));
  if (listener < 0) return -ECONNREFUSED;
  if (static_cast<int>(at(listener).backlog.size()) >= at(listener).backlog_max) return -ECONNREFUSED;
  if (!client.bound) {
    sockaddr_storage local = at(listener).local;
    if (local.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(local).sin_port = 0;
    if (local.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(local).sin6_port = 0;
    const int rc = bind(id, reinterpret_cast<sockaddr*>(&local), at(listener).local_len);
    if (rc != 0) return rc;
  }
  const int server = open(addr->sa_family);
  socket& c = at(id);  // `open` may have moved nothing (std::map), but take fresh references
  socket& s = at(server);
  s.st = state::connected;
  s.local = at(listener).local;
  s.local_len = at(listener).local_len;
  s.bound = true;
  s.remote = c.local;
  s.remote_len = c.local_len;
  s.peer = id;
  c.st = state::connected;
  c.remote = target;
  c.remote_len = len;
  c.peer = server;
  at(listener).backlog.push_back(server);
  return 0;
}

int network::take_accepted(int listener) {
  socket& l = at(listener);
  if (l.backlog.empty()) return -1;
  const int id = l.backlog.front();
  l.backlog.pop_front();
  return id;
}

long network::send(int id, const char* data, std::size_t len) {
  socket& s = at(id);
  if (s.reset) return -ECONNRESET;
  if (s.st != state::connected || s.shut_write) return -EPIPE;
  if (s.peer < 0 || !exists(s.peer)) return -EPIPE;
  socket& p = at(s.peer);
  if (p.reset) return -ECONNRESET;
  if (p.st == state::closed || p.shut_read) return -EPIPE;
  if (p.inbox.size() >= p.window) return 0;
  const std::size_t n = std::min(len, p.window - p.inbox.size());
  p.inbox.append(data, n);
  return static_cast<long>(n);
}

int network::shutdown(int id, int how) {
  socket& s = at(id);
  if (s.st == state::listening) {
    s.listener_shut = true;
    return 0;
  }
  if (s.st != state::connected) return -ENOTCONN;
  if (how == SHUT_RD || how == SHUT_RDWR) s.shut_read = true;
  if ((how == SHUT_WR || how == SHUT_RDWR) && !s.shut_write) {
    s.shut_write = true;
    if (s.peer >= 0 && exists(s.peer)) at(s.peer).eof = true;
  }
  return 0;
}

void network::reset(int id) {
  socket& s = at(id);
  s.reset = true;
  if (s.peer >= 0 && exists(s.peer)) at(s.peer).reset = true;
}

void network::close(int id) {
  socket& s = at(id);
  if (s.st == state::listening) {
    // Connections nobody accepted are reset.
    for (int pending : s.backlog) {
      reset(pending);
      close(pending);
    }
    s.backlog.clear();
  } else if (s.st == state::connected && s.peer >= 0 && exists(s.peer)) {
    socket& p = at(s.peer);
    if (s.linger_abort || !s.inbox.empty()) {
      p.reset = true;
    } else {
      p.eof = true;
    }
    p.peer = -1;
  }
  sockets_.erase(id);
}

std::size_t network::open_sockets() const noexcept { return sockets_.size(); }

}  // namespace sluice::sim
