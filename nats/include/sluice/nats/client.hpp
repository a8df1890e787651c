#pragma once
// A NATS protocol client on the runtime's own sockets (io::tcp_stream), for one executor.
//
// Protocol (https://docs.nats.io/reference/reference-protocols/nats-protocol), as spoken here:
//   server -> INFO {json}            read once at connect (max_payload, headers, server_id)
//   client -> CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,...}
//   client -> PING, server -> PONG   the handshake ends with the first PONG (CONNECT was accepted)
//   PUB <subject> [reply] <n>\r\n<payload>\r\n
//   HPUB <subject> [reply] <hdr_n> <total_n>\r\nNATS/1.0\r\nName: value\r\n\r\n<payload>\r\n
//   SUB <subject> <sid>, UNSUB <sid>
//   server -> MSG <subject> <sid> [reply] <n> / HMSG <subject> <sid> [reply] <hdr_n> <total_n>
//   server -> PING (answered with PONG), +OK, -ERR '<why>' (fails the connection)
//
// Structure: one reader coroutine per connection parses what the server sends and hands each
// message to its subscription's bounded queue (a full queue holds the reader: backpressure on the
// whole connection, memory stays bounded). One writer coroutine sends what publish() and
// friends append to an outgoing buffer, so many small publishes go out in one send (pipelining);
// the buffer is bounded (publish waits while it is above its limit). Request/reply goes through ONE
// wildcard inbox subscription, _INBOX.<random>.*, each request its own token.
//
// Bounds (invariant 9): a control line longer than 4 KiB, a line the parser does not know, a size
// that is not a number, or a payload larger than the server's max_payload is an error naming the
// fault and the server; it fails the connection (every waiter gets that error), never a crash.
//
// Everything belongs to the executor that called connect(); close() must run there too, and be
// awaited before the connection is destroyed.

#include <sluice/io/address.hpp>
#include <sluice/io/result.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/channel.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/task.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::nats {

struct message {
  std::string subject;
  std::string reply;
  std::string headers;  // the raw header block ("NATS/1.0 ...\r\n...\r\n\r\n"), empty for MSG
  std::string payload;
  // The status code of a header block "NATS/1.0 404 No Messages": 404; 0 without one.
  int status() const;
  // The value of header `name` (case-sensitive), or nullopt.
  std::optional<std::string> header(std::string_view name) const;
};

struct options {
  std::string name = "sluice";
  std::size_t subscription_queue = 1024;          // messages buffered per subscription
  std::size_t max_outgoing_bytes = std::size_t{4} << 20;  // publish waits above this
  std::chrono::milliseconds connect_timeout{5000};
};

class connection;

// A subscription's queue of messages. next() yields nullopt once the subscription or the
// connection ended (then connection::failure() says why, if it failed).
class subscription {
 public:
  runtime::task<std::optional<message>> next();
  std::uint64_t sid() const noexcept { return sid_; }

 private:
  friend class connection;
  subscription(std::uint64_t sid, std::size_t capacity) : sid_(sid), queue_(capacity) {}
  std::uint64_t sid_;
  runtime::channel<message> queue_;
};

// A request sent and not yet answered (connection::send_request).
struct pending_reply {
  runtime::event done;
  std::optional<message> reply;
};

class connection {
 public:
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection();

  // Connects, reads INFO, sends CONNECT and PING, waits for PONG, and starts the reader and writer.
  static runtime::task<io::result<std::unique_ptr<connection>>> connect(io::address server, options opts);
  // With the default options (not a default argument: GCC 12 mishandles those on coroutines).
  static runtime::task<io::result<std::unique_ptr<connection>>> connect(io::address server) {
    return connect(server, options{});
  }

  // Queues a PUB (or HPUB with `headers`, each "Name: value" without CRLF); waits only while the
  // outgoing buffer is full. The bytes go out with the writer's next send.
  runtime::task<io::result<void>> publish(std::string subject, std::string payload, std::vector<std::string> headers = {},
                                          std::string reply = {});
  // Waits until everything queued so far has been sent.
  runtime::task<io::result<void>> flush();
  // PING, and waits for the PONG: the server has processed everything sent before it (a SUB is
  // in place before another connection publishes to it).
  runtime::task<io::result<void>> round_trip(std::chrono::milliseconds timeout);
  runtime::task<io::result<std::shared_ptr<subscription>>> subscribe(std::string subject);
  runtime::task<io::result<void>> unsubscribe(std::shared_ptr<subscription> sub);

  // Publishes with a reply subject on this connection's inbox and returns the waiting slot at once:
  // send several, then await_reply each (pipelined request/reply).
  runtime::task<io::result<std::shared_ptr<pending_reply>>> send_request(std::string subject, std::string payload,
                                                                        std::vector<std::string> headers = {});
  runtime::task<io::result<message>> await_reply(std::shared_ptr<pending_reply> slot, std::chrono::milliseconds timeout);
  // send_request + await_reply.
  runtime::task<io::result<message>> request(std::string subject, std::string payload, std::chrono::milliseconds timeout,
                                             std::vector<std::string> headers = {});

  // Stops the reader and writer and closes the socket. Run it before destroying the connection.
  runtime::task<void> close();

  const std::optional<io::error>& failure() const noexcept { return failure_; }
  std::size_t max_payload() const noexcept { return max_payload_; }
  const std::string& server_name() const noexcept { return server_; }

 private:
  connection(io::tcp_stream stream, options opts);
  runtime::task<io::result<void>> handshake();
  runtime::task<void> reader();
  runtime::task<void> writer();
  runtime::task<io::result<std::string>> read_line();  // handshake only
  // Parses one item from the front of buf_: 0 needs more bytes, 1 a message for `sid` in `out`,
  // 2 handled (PING, PONG, +OK, INFO), -1 a fault (failure_ is set).
  int parse_one(message& out, std::uint64_t& sid);
  void fail(std::string why);
  io::error error(std::string what) const;
  io::result<void> check_open() const;
  void append(std::string_view bytes);

  io::tcp_stream stream_;
  options opts_;
  std::string server_;
  std::size_t max_payload_ = 1 << 20;
  std::string inbox_;
  std::uint64_t next_sid_ = 1;
  std::uint64_t next_token_ = 1;
  std::uint64_t inbox_sid_ = 0;
  std::map<std::uint64_t, std::shared_ptr<subscription>> subs_;
  std::map<std::string, std::shared_ptr<pending_reply>> requests_;
  std::deque<std::shared_ptr<pending_reply>> pongs_;  // round_trip()s waiting, in PING order
  std::string buf_;          // received, not yet parsed
  std::string out_;          // queued for the writer
  std::uint64_t queued_ = 0, sent_ = 0;  // bytes ever appended / sent
  runtime::event out_ready_, out_drained_, ended_;
  std::optional<io::error> failure_;
  bool closing_ = false;
  runtime::scope tasks_;
};

}  // namespace sluice::nats
