// tcp_transport's connections before they carry frames, on the home executor: dialing (with retries
// until connect_timeout), accepting (at most max_unauthenticated in their hello, and of those at most
// max_unauthenticated_per_source from one address), the hello of each (hello.hpp), its refusals
// (counted, and logged through a log_budget), and the settling of two connections between one pair
// of nodes.
#include "transport_core.hpp"

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/timer.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cassert>

namespace sluice::buffers::detail {

namespace {

bool connect_worth_retrying(const std::error_code& e) {
  return e == std::errc::connection_refused || e == std::errc::connection_reset ||
         e == std::errc::connection_aborted || e == std::errc::timed_out || e == std::errc::host_unreachable ||
         e == std::errc::network_unreachable || e == std::errc::operation_canceled ||
         e == std::errc::resource_unavailable_try_again;
}

std::uint64_t& counter_of(hello_rejections& r, hello_refusal why) {
  switch (why) {
    case hello_refusal::wrong_job: return r.wrong_job;
    case hello_refusal::stale_epoch: return r.stale_epoch;
    case hello_refusal::future_epoch: return r.future_epoch;
    case hello_refusal::authentication: return r.authentication;
    case hello_refusal::same_node: return r.same_node;
    case hello_refusal::closed: return r.closed;
    case hello_refusal::timeout: return r.timeout;
    case hello_refusal::none:
    case hello_refusal::duplicate:
    case hello_refusal::malformed: break;
  }
  return r.malformed;
}

}  // namespace

connection* transport_core::up_connection_to(const std::string& node, const connection* besides) {
  if (node.empty()) return nullptr;
  auto it = by_node_.find(node);
  if (it == by_node_.end()) return nullptr;
  connection* c = find(it->second);
  return c != nullptr && c != besides && c->up && !c->failed ? c : nullptr;
}

connection& transport_core::dial(const io::address& peer) {
  const std::string key = peer.to_string();
  if (auto it = dialed_.find(key); it != dialed_.end()) {
    if (connection* c = find(it->second); c != nullptr && !c->failed) return *c;
  }
  // A peer whose node id is its advertised address may have dialed this side already: ride that.
  if (connection* c = up_connection_to(key, nullptr)) {
    dialed_[key] = c->id;
    return *c;
  }
  auto owned = std::make_unique<connection>(next_connection_id_++, peer, true, options);
  connection& c = *owned;
  dialed_[key] = c.id;
  connections.emplace(c.id, std::move(owned));
  ++stats.connections_dialed;
  connection_tasks_.spawn(dial_and_run(&c));
  return c;
}

bool transport_core::claim_node(connection& c, const std::string& node) {
  if (node.empty()) return true;  // no node ids: every connection stands alone
  auto it = by_node_.find(node);
  if (it != by_node_.end() && it->second != c.id) {
    if (connection* other = find(it->second); other != nullptr && !other->failed) return false;
  }
  by_node_[node] = c.id;
  c.claimed = true;
  return true;
}

runtime::task<hello_outcome> transport_core::hello(connection* c) {
  std::function<bool(const peer_hello&)> keep = [this, c](const peer_hello& p) { return claim_node(*c, p.node_id); };
  runtime::task<hello_outcome> exchange = exchange_hello(&c->stream, &identity, c->dialed, std::move(keep));
  runtime::task<std::optional<hello_outcome>> bounded = runtime::with_timeout(std::move(exchange), options.hello_timeout);
  std::optional<hello_outcome> outcome = co_await runtime::with_stop_token(std::move(bounded), c->hello_stop.get_token());
  if (!outcome || (!outcome->ok && c->hello_stop.stop_requested())) {
    hello_outcome timed_out;
    timed_out.refusal = hello_refusal::timeout;
    timed_out.reason = c->failed ? c->failure
                                 : fmt::format("no complete hello within {} ms (transport_options::hello_timeout)",
                                               options.hello_timeout.count());
    timed_out.retry = c->dialed;
    if (outcome) timed_out.peer = outcome->peer;
    co_return timed_out;
  }
  co_return std::move(*outcome);
}

void transport_core::go_up(connection& c, const peer_hello& peer) {
  c.peer_node = peer.node_id;
  if (!peer.node_id.empty()) {
    by_node_[peer.node_id] = c.id;  // the arbiter chose this one (or this side is the arbiter)
    c.claimed = true;
  }
  c.decoder.emplace(c.decoder_config);
  c.up = true;
  std::vector<std::uint32_t> waiting;  // send_partition_request may close a channel (erase it)
  for (auto& [wire, ch] : c.in) {
    if (!ch.requested) waiting.push_back(wire);
  }
  std::sort(waiting.begin(), waiting.end());  // in the order they were opened
  for (std::uint32_t wire : waiting) {
    if (auto it = c.in.find(wire); it != c.in.end()) send_partition_request(c, wire, it->second);
  }
}

void transport_core::refused(connection& c, const hello_outcome& o) {
  if (c.claimed) {
    if (auto it = by_node_.find(c.peer_node); it != by_node_.end() && it->second == c.id) by_node_.erase(it);
    c.claimed = false;
  }
  const std::string line =
      fmt::format("connection {} {} refused: {}", c.dialed ? "to" : "from", c.peer.to_string(), o.reason);
  const std::string why = "refused: " + o.reason;
  if (o.refusal == hello_refusal::duplicate) {
    ++stats.duplicates_closed;
    runtime::log::info("tcp transport: {}", line);
    fail(c, why, false, true, true);
    return;
  }
  if (closing) {
    fail(c, why, false, true, true);
    return;
  }
  ++counter_of(stats.rejected, o.refusal);
  log_refusal(to_string(o.refusal), line);
  if (stats.recent_failures.size() == 16) stats.recent_failures.erase(stats.recent_failures.begin());
  stats.recent_failures.push_back(line);
  fail(c, why, false, false, true);
}

void transport_core::log_refusal(std::string_view kind, const std::string& line) {
  log_refusal_summaries(false);
  if (refusal_log_.admit(kind, home->now(), line)) runtime::log::warn("tcp transport: {}", line);
}

void transport_core::log_refusal_summaries(bool all) {
  const auto now = home->now();
  for (const log_budget::summary& s : all ? refusal_log_.flush(now) : refusal_log_.due(now)) {
    // "latest from", not "connection from": a summary is not one connection's line.
    std::string latest = s.latest;
    if (latest.rfind("connection ", 0) == 0) latest.erase(0, 11);
    runtime::log::warn("tcp transport: {} more connection(s) refused ({}) in the last {:.1f} s, not logged one by "
                       "one (at most {} lines per reason per {} ms: transport_options::refusal_log_lines, "
                       "refusal_log_window); the latest: {}",
                       s.suppressed, s.kind, static_cast<double>(s.window.count()) / 1000.0,
                       options.refusal_log_lines, options.refusal_log_window.count(), latest);
  }
}

void transport_core::migrate(connection& from, connection& to) {
  assert(!from.up && from.dialed);
  std::vector<std::uint32_t> wires;
  for (auto& [wire, ch] : from.in) wires.push_back(wire);
  std::sort(wires.begin(), wires.end());
  for (std::uint32_t wire : wires) {
    auto it = from.in.find(wire);
    connection::in_channel moved = std::move(it->second);
    from.in.erase(it);
    const std::uint32_t new_wire = to.next_wire_channel;
    to.next_wire_channel += 2;
    moved.input->connection_id_ = to.id;
    moved.input->wire_channel_ = new_wire;
    connection::in_channel& ch = to.in[new_wire];
    ch = std::move(moved);
    if (to.up && !ch.requested) send_partition_request(to, new_wire, ch);
  }
  dialed_[from.peer.to_string()] = to.id;
  ++stats.duplicates_closed;
  const std::string why = fmt::format("its channels ride connection {} {} (node '{}') instead",
                                      to.dialed ? "to" : "from", to.peer.to_string(), to.peer_node);
  runtime::log::info("tcp transport: connection to {}: {}", from.peer.to_string(), why);
  fail(from, why, false, true, true);
}

runtime::task<void> transport_core::dial_and_run(connection* c) {
  runtime::executor* ex = runtime::executor::current();
  const auto deadline = ex->now() + options.connect_timeout;
  std::chrono::milliseconds backoff{20};
  std::string expected_node;  // learned from a hello that got that far
  std::string last_error;
  std::uint64_t attempts = 0;
  while (!c->failed && !closing) {
    if (connection* winner = up_connection_to(expected_node.empty() ? c->peer.to_string() : expected_node, c)) {
      migrate(*c, *winner);
      break;
    }
    ++attempts;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - ex->now());
    std::optional<io::result<io::tcp_stream>> stream = co_await runtime::with_timeout(
        io::tcp_stream::connect(c->peer), std::max(left, std::chrono::milliseconds(1)));
    if (c->failed || closing) break;
    bool retry = true;
    if (!stream) {
      last_error = fmt::format("connect {}: timed out", c->peer.to_string());
    } else if (!*stream) {
      last_error = stream->error().message();
      retry = connect_worth_retrying(stream->error().code());
    } else {
      c->stream = std::move(*stream).value();
      (void)c->stream.set_nodelay(true);
      (void)c->stream.set_dead_peer_timeout(options.dead_peer_timeout);
      hello_outcome o = co_await hello(c);
      if (o.ok) {
        go_up(*c, o.peer);
        break;
      }
      if (!o.peer.node_id.empty()) expected_node = o.peer.node_id;
      if (c->failed || closing) break;
      if (!o.retry) {
        refused(*c, o);
        break;
      }
      last_error = o.reason;
      if (o.refusal == hello_refusal::duplicate) {
        runtime::log::info("tcp transport: connection to {}: {}; its channels wait for the other connection",
                           c->peer.to_string(), o.reason);
        backoff = std::chrono::milliseconds(5);  // the winner's welcome is on its way
      }
      (void)co_await c->stream.close();
      c->stream = io::tcp_stream{};
    }
    if (!retry) {
      fail(*c, last_error, false);
      break;
    }
    if (ex->now() + backoff >= deadline) {
      fail(*c, fmt::format("could not connect within {} ms ({} attempts; transport_options::connect_timeout): {}",
                           options.connect_timeout.count(), attempts, last_error),
           false);
      break;
    }
    if (attempts == 1) {
      runtime::log::info("tcp transport: connection to {}: {}; retrying for up to {} ms", c->peer.to_string(),
                         last_error, options.connect_timeout.count());
    }
    ++stats.dial_retries;
    const bool slept = co_await runtime::sleep_for(backoff);
    if (!slept) break;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1'000));
  }
  if (!c->failed && !c->up) fail(*c, "tcp transport closed", false);
  co_await run_connection(c);
}

void transport_core::note_over_capacity(const io::address& peer, const std::string& why) {
  ++stats.rejected.over_capacity;
  log_refusal("over-capacity", fmt::format("connection from {} refused: {}", peer.to_string(), why));
}

namespace {
std::string source_of(const io::address& peer) { return peer.with_port(0).to_string(); }
}  // namespace

runtime::task<void> transport_core::accept_loop() {
  while (!closing) {
    io::result<io::tcp_stream> accepted = co_await listener.accept();
    if (!accepted) {
      if (closing || accepted.error().code() == std::errc::operation_canceled) break;
      runtime::log::warn("tcp transport: {}", accepted.error().message());
      const bool slept = co_await runtime::sleep_for(std::chrono::milliseconds(50));  // e.g. EMFILE: back off
      if (!slept) break;
      continue;
    }
    io::tcp_stream stream = std::move(accepted).value();
    const io::address peer = stream.peer();
    const std::string source = source_of(peer);
    auto from_source = unauthenticated_by_source_.find(source);
    std::string full;
    if (unauthenticated_ >= options.max_unauthenticated) {
      full = fmt::format("{} connections are already in their hello (transport_options::max_unauthenticated)",
                         unauthenticated_);
    } else if (from_source != unauthenticated_by_source_.end() &&
               from_source->second >= options.max_unauthenticated_per_source) {
      full = fmt::format("{} connections from its address are already in their hello "
                         "(transport_options::max_unauthenticated_per_source)",
                         from_source->second);
    }
    if (!full.empty()) {
      note_over_capacity(peer, full);
      (void)co_await stream.close();
      continue;
    }
    ++unauthenticated_by_source_[source];
    (void)stream.set_nodelay(true);
    (void)stream.set_dead_peer_timeout(options.dead_peer_timeout);
    auto owned = std::make_unique<connection>(next_connection_id_++, peer, false, options);
    connection* c = owned.get();
    c->stream = std::move(stream);
    connections.emplace(c->id, std::move(owned));
    ++stats.connections_accepted;
    stats.unauthenticated = ++unauthenticated_;
    stats.unauthenticated_peak = std::max(stats.unauthenticated_peak, unauthenticated_);
    connection_tasks_.spawn(accept_and_run(c));
  }
}

runtime::task<void> transport_core::accept_and_run(connection* c) {
  hello_outcome o = co_await hello(c);
  stats.unauthenticated = --unauthenticated_;
  if (auto it = unauthenticated_by_source_.find(source_of(c->peer)); it != unauthenticated_by_source_.end()) {
    if (--it->second == 0) unauthenticated_by_source_.erase(it);
  }
  if (o.ok && !c->failed) {
    go_up(*c, o.peer);
  } else if (!c->failed) {
    refused(*c, o);
  }
  co_await run_connection(c);
}

}  // namespace sluice::buffers::detail
