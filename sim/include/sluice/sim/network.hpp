#pragma once
// network: simulated TCP on one host. Sockets bind to ports, listeners queue connections, and a
// connection is a pair of byte queues with a bounded receive window each. Bytes written by one end
// are read by the other in the chunks the caller of `recv` is given (the world cuts them at random
// points). An end can be shut down for writing (the peer then reads the rest and an end of stream),
// reset (both ends' operations fail with ECONNRESET) or stalled (nothing is delivered until a time).

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace sluice::sim {

class network {
 public:
  using clock = std::chrono::steady_clock;
  enum class state : std::uint8_t { fresh, listening, connected, closed };

  struct socket {
    state st = state::fresh;
    int family = AF_INET;
    sockaddr_storage local{};
    socklen_t local_len = 0;
    bool bound = false;
    sockaddr_storage remote{};
    socklen_t remote_len = 0;
    // listening
    std::deque<int> backlog;  // accepted-side sockets waiting for accept()
    int backlog_max = 128;
    bool listener_shut = false;
    // connected
    int peer = -1;
    std::string inbox;  // bytes the peer sent and this end has not read
    std::size_t window = 64 * 1024;
    bool eof = false;      // the peer shut down writing; after inbox, reads return 0
    bool reset = false;    // operations fail with ECONNRESET
    bool shut_read = false;
    bool shut_write = false;
    bool linger_abort = false;  // SO_LINGER {1, 0}: close resets the peer
    clock::time_point stalled_until{};
  };

  int open(int family);  // a fresh socket's id
  socket& at(int id) { return sockets_.at(id); }
  const socket& at(int id) const { return sockets_.at(id); }
  bool exists(int id) const { return sockets_.count(id) != 0; }

  int bind(int id, const sockaddr* addr, socklen_t len);
  int listen(int id, int backlog);
  // Connects `id` to the listener at `addr`: -ECONNREFUSED without one (or a full backlog).
  int connect(int id, const sockaddr* addr, socklen_t len);
  // Takes the oldest queued connection of a listener: its socket id, or -1.
  int take_accepted(int listener);
  // Appends up to `len` bytes to the peer's inbox within its window: the count, 0 when the window is
  // full (the caller waits), or -errno.
  long send(int id, const char* data, std::size_t len);
  int shutdown(int id, int how);
  void reset(int id);
  // Closes the socket: the peer sees an end of stream, or a reset with linger_abort or unread data.
  void close(int id);
  std::size_t open_sockets() const noexcept;

  // Connected sockets, in id order (for fault injection).
  template <class F>
  void for_each_connected(F&& f) {
    for (auto& [id, s] : sockets_) {
      if (s.st == state::connected) f(id, s);
    }
  }

 private:
  static int port_of(const sockaddr_storage& a);
  int find_listener(int family, int port) const;

  std::map<int, socket> sockets_;
  int next_id_ = 1;
  int next_port_ = 40000;
};

}  // namespace sluice::sim
