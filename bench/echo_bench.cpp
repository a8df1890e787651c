// echo: TCP echo throughput of a sluice server against a Boost.Asio server, driven by the same
// neutral load generator (tcp_load.hpp: one thread, raw liburing or epoll, N connections, one
// request in flight each).
//
// Set-up, the same for both servers: the server runs in this process on ONE thread of its own (a
// one-executor sluice engine; a single-threaded asio::io_context, epoll reactor), the generator runs
// on the calling thread, so the two share the machine's cores alike. Both servers receive into a
// 4 KiB buffer and write back what they got. Each measurement starts a fresh server, connects,
// runs the closed loop for --duration-ms, disconnects and stops the server; sluice and Asio
// measurements alternate.

#include "bench.hpp"
#include "tcp_load.hpp"

#include <sluice/io/address.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/scope.hpp>

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>
#include <boost/asio.hpp>

#include <fmt/core.h>
#include <pthread.h>
#include <sched.h>

#include <array>
#include <memory>
#include <stdexcept>
#include <thread>

namespace sluice::bench {
namespace {

namespace rt = sluice::runtime;
namespace asio = boost::asio;

constexpr std::size_t server_buffer_bytes = 4096;

// --- the sluice server ------------------------------------------------------------------------

rt::task<void> sluice_echo_connection(io::tcp_stream stream) {
  std::array<std::byte, server_buffer_bytes> buffer;
  for (;;) {
    auto got = co_await stream.recv(buffer);
    if (!got || *got == 0) break;
    auto sent = co_await stream.send_all(std::span<const std::byte>(buffer.data(), *got));
    if (!sent) break;
  }
}

rt::task<void> sluice_echo_server(io::tcp_listener listener) {
  rt::scope connections;
  for (;;) {
    auto accepted = co_await listener.accept();
    if (!accepted) break;  // stopped (ECANCELED), or the listener failed
    (void)accepted->set_nodelay(true);
    connections.spawn(sluice_echo_connection(std::move(*accepted)));
  }
  connections.request_stop();
  co_await connections.join();
}

class sluice_server {
 public:
  explicit sluice_server(bool pin) : engine_(options(pin)) {
    auto listener = io::tcp_listener::listen(io::address::loopback_v4()).value();
    port_ = listener.local_address().port();
    rt::spawn_on(engine_.at(0), sluice_echo_server(std::move(listener)));
  }
  std::uint16_t port() const noexcept { return port_; }

 private:
  static rt::engine_options options(bool pin) {
    rt::engine_options o;
    o.executors = 1;
    o.pin_cpus = pin;  // executor 0 on CPU 0
    o.handle_signals = false;
    return o;
  }
  rt::engine engine_;  // its destructor stops the server: the accept is cancelled, connections end
  std::uint16_t port_ = 0;
};

// --- the Boost.Asio server --------------------------------------------------------------------

class asio_session : public std::enable_shared_from_this<asio_session> {
 public:
  explicit asio_session(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}
  void start() {
    boost::system::error_code ignored;
    socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
    read();
  }

 private:
  void read() {
    socket_.async_read_some(asio::buffer(buffer_),
                            [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                              if (!ec) self->write(n);
                            });
  }
  void write(std::size_t n) {
    asio::async_write(socket_, asio::buffer(buffer_.data(), n),
                      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                        if (!ec) self->read();
                      });
  }
  asio::ip::tcp::socket socket_;
  std::array<char, server_buffer_bytes> buffer_;
};

class asio_server {
 public:
  explicit asio_server(bool pin)
      : acceptor_(context_, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this, pin] {
      if (pin) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      }
      context_.run();
    });
  }
  ~asio_server() {
    context_.stop();
    thread_.join();
  }
  asio_server(const asio_server&) = delete;
  asio_server& operator=(const asio_server&) = delete;
  std::uint16_t port() const noexcept { return port_; }

 private:
  void accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket socket) {
      if (ec) return;
      std::make_shared<asio_session>(std::move(socket))->start();
      accept();
    });
  }
  asio::io_context context_{1};  // concurrency hint: one thread runs it
  asio::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// --- the benchmark ----------------------------------------------------------------------------

// Pins the generator (this thread) to CPU 1 while it lives, when asked.
class pin_scope {
 public:
  explicit pin_scope(bool pin) : pin_(pin) {
    if (!pin_) return;
    pthread_getaffinity_np(pthread_self(), sizeof previous_, &previous_);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(1 % std::max(1u, std::thread::hardware_concurrency()), &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  ~pin_scope() {
    if (pin_) pthread_setaffinity_np(pthread_self(), sizeof previous_, &previous_);
  }
  pin_scope(const pin_scope&) = delete;
  pin_scope& operator=(const pin_scope&) = delete;

 private:
  bool pin_;
  cpu_set_t previous_{};
};

class echo_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "echo"; }
  std::string_view description() const noexcept override {
    return "TCP echo req/s: sluice server vs Boost.Asio (epoll) server, same load generator";
  }
  std::vector<option> options() override {
    return {
        {"--connections", "concurrent connections (one request in flight each)", &connections_},
        {"--message-bytes", "bytes per message", &message_bytes_},
        {"--duration-ms", "length of each measurement (sluice and Asio each)", &duration_ms_},
        {"--pin", "pin the server thread to CPU 0 and the load generator to CPU 1", &pin_},
        {"--generator",
         "load generator engine: uring (raw liburing, cheap per request, so the server is the limit) or "
         "epoll (send/recv syscalls; about as costly as a server, so it can be the limit)",
         &generator_},
    };
  }

  void run(const common_options& common, const reporter& out) override {
    if (connections_ == 0 || message_bytes_ == 0 || duration_ms_ == 0) {
      throw std::invalid_argument("--connections, --message-bytes and --duration-ms must be at least 1");
    }
    if (generator_ != "uring" && generator_ != "epoll") throw std::invalid_argument("--generator must be uring or epoll");
    const auto load = [this](std::uint16_t port) {
      tcp_load_options o;
      o.engine = generator_ == "uring" ? tcp_load_engine::uring : tcp_load_engine::epoll;
      o.port = port;
      o.connections = connections_;
      o.message_bytes = message_bytes_;
      o.duration = std::chrono::milliseconds(duration_ms_);
      pin_scope pinned(pin_);
      return run_tcp_load(o).requests_per_s();
    };
    const bool pin = pin_;
    auto r = measure_paired(
        common.runs,
        [&] {
          sluice_server server(pin);
          return load(server.port());
        },
        [&] {
          asio_server server(pin);
          return load(server.port());
        });
    const double ratio = r.figure / r.baseline;
    out.result(name(),
               fmt::format("echo: {}req/s  baseline (Boost.Asio epoll, 1 thread) {}req/s  ratio {:.2f}  "
                           "({} connections, {}-byte messages, {} generator)  target >= 1.0: {}",
                           human_rate(r.figure), human_rate(r.baseline), ratio, connections_, message_bytes_, generator_,
                           ratio >= 1.0 ? "met" : "MISSED"),
               {{"requests_per_s", r.figure},
                {"baseline_requests_per_s", r.baseline},
                {"ratio", ratio},
                {"connections", std::uint64_t{connections_}},
                {"message_bytes", std::uint64_t{message_bytes_}},
                {"duration_ms", duration_ms_},
                {"pinned", pin_},
                {"generator", generator_},
                {"runs", std::uint64_t{common.runs}}});
  }

 private:
  unsigned connections_ = 64;
  unsigned message_bytes_ = 100;
  std::uint64_t duration_ms_ = 500;
  bool pin_ = false;
  std::string generator_ = "uring";
};

registration<echo_bench> reg;

}  // namespace
}  // namespace sluice::bench
