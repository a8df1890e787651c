#pragma once
// free_port(): a loopback TCP port for a test's listener, below the ephemeral range.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>

namespace sluice::test {

// A loopback port nobody listens on right now, below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port picked from that range can be taken by any outgoing
// connection (an etcd client's, say) before the worker binds it, which a test sees as a failed
// start. Another test process could still take the same port, which random picks make unlikely.
inline unsigned free_port() {
  unsigned low = 32768;
  {
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    unsigned l = 0;
    if (range >> l && l > 12000) low = l;
  }
  static std::mt19937 rng(std::random_device{}());
  for (int tries = 0; tries < 200; ++tries) {
    const unsigned port = std::uniform_int_distribution<unsigned>(10000, low - 1)(rng);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (bound) return port;
  }
  throw std::runtime_error("free_port: no free loopback port below the ephemeral range");
}

}  // namespace sluice::test
