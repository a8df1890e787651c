// `sluice demo` (interim, until io/ lands): clients on executor 0 send messages to a "server" on
// executor 1 by hopping there with switch_to, which echoes them back; a timer prints progress.
// Ctrl-C stops it gracefully: the engine turns SIGINT into a stop request that every task sees.

#include "demo.hpp"
#include "latency_histogram.hpp"

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_any.hpp>

#include <fmt/core.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace sluice::apps {
namespace {

namespace rt = sluice::runtime;
using demo_clock = std::chrono::steady_clock;

struct client_stats {
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  latency_histogram latency;
};

rt::task<void> client(rt::executor* home, rt::executor* server, demo_clock::time_point deadline, unsigned bytes,
                      client_stats* stats) {
  const std::stop_token stop = co_await rt::current_stop_token();
  std::vector<unsigned char> message(bytes), reply(bytes);
  std::uint64_t seq = 0;
  while (!stop.stop_requested() && demo_clock::now() < deadline) {
    std::memset(message.data(), static_cast<int>(seq++ & 0xff), message.size());
    const auto sent = demo_clock::now();
    co_await rt::switch_to(*server);
    std::memcpy(reply.data(), message.data(), message.size());  // the server's echo
    co_await rt::switch_to(*home);
    if (std::memcmp(reply.data(), message.data(), message.size()) != 0) throw std::runtime_error("echo mismatch");
    stats->latency.record(static_cast<std::uint64_t>((demo_clock::now() - sent).count()));
    ++stats->messages;
    stats->bytes += 2 * bytes;
  }
}

rt::task<void> run_clients(demo_options o, rt::engine* eng, std::vector<client_stats>* stats) {
  rt::executor* home = rt::executor::current();
  rt::executor* server = &eng->at(eng->size() > 1 ? 1 : 0);
  const auto deadline = demo_clock::now() + std::chrono::milliseconds(o.duration_ms);
  rt::scope clients;
  for (auto& s : *stats) clients.spawn(client(home, server, deadline, o.message_bytes, &s));
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

rt::task<double> demo_main(demo_options o, rt::engine* eng, std::vector<client_stats>* stats) {
  const auto start = demo_clock::now();
  co_await rt::when_any(run_clients(o, eng, stats), progress(stats, o.quiet));
  co_return std::chrono::duration<double>(demo_clock::now() - start).count();
}

}  // namespace

void add_demo_options(CLI::App& command, demo_options& o) {
  command.add_option("--connections,-c", o.connections, "Concurrent clients")->capture_default_str()->check(
      CLI::Range(1u, 100000u));
  command.add_option("--message-bytes", o.message_bytes, "Bytes per message")->capture_default_str()->check(
      CLI::Range(1u, 1u << 20));
  command.add_option("--duration-ms,-d", o.duration_ms, "How long the clients run")->capture_default_str();
  command.add_option("--executors", o.executors, "Executors (threads) in the engine")->capture_default_str()->check(
      CLI::Range(1u, 256u));
  command.add_flag("--quiet,-q", o.quiet, "No progress lines, only the summary");
}

int run_demo(const demo_options& o) {
  std::vector<client_stats> stats(o.connections);
  rt::engine_options eo;
  eo.executors = o.executors;
  rt::engine eng(eo);
  fmt::print("sluice demo: {} clients on executor 0 exchange {}-byte messages with a server on executor {} "
             "for {} ms (Ctrl-C stops early)\n",
             o.connections, o.message_bytes, eng.size() > 1 ? 1 : 0, o.duration_ms);
  std::fflush(stdout);
  const double seconds = eng.block_on(demo_main(o, &eng, &stats));
  const int signal = eng.stop_signal();
  eng.stop();

  client_stats total;
  for (auto& s : stats) {
    total.messages += s.messages;
    total.bytes += s.bytes;
    total.latency.merge(s.latency);
  }
  fmt::print("{}\n", signal != 0 ? "stopped by signal" : "done");
  fmt::print("  clients      {}\n", o.connections);
  fmt::print("  messages     {} round trips\n", total.messages);
  fmt::print("  bytes        {} (both directions)\n", total.bytes);
  fmt::print("  elapsed      {:.2f} s\n", seconds);
  fmt::print("  throughput   {:.0f} req/s\n", seconds > 0 ? static_cast<double>(total.messages) / seconds : 0.0);
  fmt::print("  latency      p50 {:.1f} us  p99 {:.1f} us\n", static_cast<double>(total.latency.percentile(0.50)) / 1e3,
             static_cast<double>(total.latency.percentile(0.99)) / 1e3);
  return 0;
}

}  // namespace sluice::apps
