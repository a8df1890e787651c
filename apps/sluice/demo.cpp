// `sluice demo`: a small real program of the runtime. An engine runs a TCP echo server on
// 127.0.0.1 (port chosen by the kernel) on its last executor, and N client connections on executor
// 0 that each send a message, wait for the whole echo, check it and send the next, for a while.
// A timer prints progress; at the end the demo prints what it did (connections, messages, bytes,
// req/s, p50/p99 round-trip latency).
//
// Ctrl-C (or SIGTERM) stops it gracefully: the engine turns the signal into a stop request, every
// pending receive and accept is cancelled through its task's stop token, and the summary of what
// was done so far is printed.

#include "demo.hpp"
#include "cli_options.hpp"
#include "latency_histogram.hpp"

#include <sluice/io/address.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_any.hpp>

#include <fmt/core.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace sluice::apps {
namespace {

namespace rt = sluice::runtime;
using demo_clock = std::chrono::steady_clock;

struct client_stats {
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  latency_histogram latency;
  std::optional<std::string> failure;  // a real error (a stop is not one)
};

// --- the server: one task per connection, echoing what it receives --------------------------

rt::task<void> echo_connection(io::tcp_stream stream) {
  std::array<std::byte, 4096> buffer;
  for (;;) {
    auto got = co_await stream.recv(buffer);
    if (!got || *got == 0) break;  // peer closed, reset, or we are stopping
    if (!co_await stream.send_all(std::span<const std::byte>(buffer.data(), *got))) break;
  }
}

rt::task<void> echo_server(io::tcp_listener listener) {
  rt::scope connections;
  for (;;) {
    auto accepted = co_await listener.accept();
    if (!accepted) break;  // cancelled by the stop
    (void)accepted->set_nodelay(true);
    connections.spawn(echo_connection(std::move(*accepted)));
  }
  connections.request_stop();
  co_await connections.join();
}

// --- the clients ------------------------------------------------------------------------------

bool is_cancelled(const io::error& e) { return e.code() == std::errc::operation_canceled; }

rt::task<void> client(io::address server, unsigned index, unsigned message_bytes, demo_clock::time_point deadline,
                      client_stats* stats) {
  const std::stop_token stop = co_await rt::current_stop_token();
  auto connected = co_await io::tcp_stream::connect(server);
  if (!connected) {
    if (!is_cancelled(connected.error())) stats->failure = connected.error().message();
    co_return;
  }
  io::tcp_stream stream = std::move(*connected);
  (void)stream.set_nodelay(true);
  std::vector<std::byte> message(message_bytes), reply(message_bytes);
  for (std::uint32_t seq = 0; !stop.stop_requested() && demo_clock::now() < deadline; ++seq) {
    for (std::size_t i = 0; i < message.size(); ++i) message[i] = static_cast<std::byte>(seq * 31u + index + i);
    const auto sent_at = demo_clock::now();
    auto sent = co_await stream.send_all(message);
    if (!sent) {
      if (!is_cancelled(sent.error())) stats->failure = sent.error().message();
      break;
    }
    auto got = co_await stream.recv_exact(reply);
    if (!got) {
      if (!is_cancelled(got.error())) stats->failure = got.error().message();
      break;
    }
    if (*got != reply.size() || reply != message) {
      stats->failure = fmt::format("connection {}: the echo differs from the message sent", index);
      break;
    }
    stats->latency.record(static_cast<std::uint64_t>((demo_clock::now() - sent_at).count()));
    ++stats->messages;
    stats->bytes += 2u * message_bytes;
  }
  (void)co_await stream.close();
}

rt::task<void> run_clients(demo_options o, io::address server, std::vector<client_stats>* stats) {
  const auto deadline = demo_clock::now() + std::chrono::milliseconds(o.duration_ms);
  rt::scope clients;
  for (unsigned i = 0; i < stats->size(); ++i) clients.spawn(client(server, i, o.message_bytes, deadline, &(*stats)[i]));
  co_await clients.join();
}

// Prints progress every 500 ms until stopped (when_any stops it once the clients are done).
rt::task<void> progress(std::vector<client_stats>* stats, bool quiet) {
  const auto start = demo_clock::now();
  while (co_await rt::sleep_for(std::chrono::milliseconds(500))) {
    std::uint64_t messages = 0;
    for (auto& s : *stats) messages += s.messages;
    if (!quiet) {
      fmt::print("  {:5.1f} s  {} messages\n", std::chrono::duration<double>(demo_clock::now() - start).count(),
                 messages);
      std::fflush(stdout);
    }
  }
}

rt::task<double> demo_main(demo_options o, io::address server, std::vector<client_stats>* stats) {
  const auto start = demo_clock::now();
  co_await rt::when_any(run_clients(o, server, stats), progress(stats, o.quiet));
  co_return std::chrono::duration<double>(demo_clock::now() - start).count();
}

}  // namespace

void add_demo_options(CLI::App& command, demo_options& o) {
  // Each connection is two descriptors (client and server side) in this one process.
  add_number_option(command, "--connections,-c", o.connections, "Client connections", 1, 10'000);
  add_number_option(command, "--message-bytes", o.message_bytes, "Bytes per message", 1, 1u << 20);
  add_number_option(command, "--duration-ms,-d", o.duration_ms, "How long the clients run", 1, 3'600'000);
  add_number_option(command, "--executors", o.executors, "Executors (threads): the server runs on the last one", 1,
                    limits::max_executors);
  command.add_flag("--quiet,-q", o.quiet, "No progress lines, only the summary");
}

int run_demo(const demo_options& o) {
  std::vector<client_stats> stats(o.connections);
  rt::engine_options eo;
  eo.executors = o.executors;
  rt::engine eng(eo);

  auto listener = io::tcp_listener::listen(io::address::loopback_v4()).value();
  const io::address server = listener.local_address();
  const std::size_t server_executor = eng.size() - 1;
  rt::spawn_on(eng.at(server_executor), echo_server(std::move(listener)));

  fmt::print("sluice demo: echo server on {} (executor {}); {} connections from executor 0 send {}-byte messages "
             "for {} ms (Ctrl-C stops early)\n",
             server.to_string(), server_executor, o.connections, o.message_bytes, o.duration_ms);
  std::fflush(stdout);
  const double seconds = eng.block_on(demo_main(o, server, &stats));
  const int signal = eng.stop_signal();
  eng.stop();

  client_stats total;
  std::uint64_t failed = 0;
  for (auto& s : stats) {
    total.messages += s.messages;
    total.bytes += s.bytes;
    total.latency.merge(s.latency);
    if (s.failure) {
      if (failed == 0) fmt::print(stderr, "sluice demo: a connection failed: {}\n", *s.failure);
      ++failed;
    }
  }
  fmt::print("{}\n", signal != 0 ? fmt::format("stopped by {}", signal == SIGINT ? "SIGINT" : "SIGTERM") : "done");
  fmt::print("  connections  {} ({} failed)\n", o.connections, failed);
  fmt::print("  messages     {} round trips of {} bytes\n", total.messages, o.message_bytes);
  fmt::print("  bytes        {} (sent and received)\n", total.bytes);
  fmt::print("  elapsed      {:.2f} s\n", seconds);
  fmt::print("  throughput   {:.0f} req/s\n", seconds > 0 ? static_cast<double>(total.messages) / seconds : 0.0);
  fmt::print("  latency      p50 {:.1f} us  p99 {:.1f} us\n", static_cast<double>(total.latency.percentile(0.50)) / 1e3,
             static_cast<double>(total.latency.percentile(0.99)) / 1e3);
  return failed == 0 ? 0 : 1;
}

}  // namespace sluice::apps
