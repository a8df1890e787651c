// tcp_transport: the public face, the transport's start and close, and the end of a connection.
// Channel set-up and teardown are in transport_channels.cpp, dialing, accepting and the hello in
// transport_dialing.cpp, the connection loops (reading and writing frames) in tcp_connection.cpp.
#include "transport_core.hpp"

#include <sluice/buffers/event_codec.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/timer.hpp>

#include <fmt/core.h>

#include <cassert>

namespace sluice::buffers {

using detail::connection;
using detail::transport_core;

// --- remote_input (the gate's executor) ---------------------------------------------------------

void remote_input::grant(std::uint32_t credits) {
  SLUICE_ASSERT(runtime::executor::current() == gate_executor_, "remote_input::grant off the gate's executor");
  std::vector<gate_buffer> lent;
  lent.reserve(credits);
  for (std::uint32_t i = 0; i < credits; ++i) lent.push_back(gate_->request_buffer_for(gate_channel_));
  core_->home->post([core = core_, self = this, lent = std::move(lent)]() mutable {
    core->on_grant(self, std::move(lent));
  });
}

runtime::task<bool> remote_input::wait_closed() { co_return co_await closed_.wait(); }

// --- tcp_transport -------------------------------------------------------------------------------

tcp_transport::tcp_transport(std::unique_ptr<transport_core> core) : core_(std::move(core)) {}
tcp_transport::~tcp_transport() = default;

runtime::task<io::result<std::unique_ptr<tcp_transport>>> tcp_transport::start(io::address listen_on,
                                                                              transport_options options) {
  if (options.max_frame_payload_bytes == 0 || options.max_frame_payload_bytes > max_payload_limit_bytes ||
      options.receive_chunk_bytes < max_control_frame_bytes || options.send_batch_bytes == 0 ||
      options.max_channels_per_connection == 0 || options.max_channels_per_connection > max_channels_limit) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument),
                        fmt::format("tcp transport: bad options (max frame payload {} bytes, receive chunk {} bytes, "
                                    "send batch {} bytes, {} channels per connection)",
                                    options.max_frame_payload_bytes, options.receive_chunk_bytes,
                                    options.send_batch_bytes, options.max_channels_per_connection));
  }
  if (options.hello_timeout.count() <= 0 || options.connect_timeout.count() < 0 || options.max_unauthenticated == 0 ||
      options.max_unauthenticated_per_source == 0 || options.refusal_log_window.count() <= 0) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument),
                        fmt::format("tcp transport: bad options (hello timeout {} ms, connect timeout {} ms, max "
                                    "unauthenticated {}, {} per source, refusal log window {} ms): the hello "
                                    "timeout, the caps and the window must be positive",
                                    options.hello_timeout.count(), options.connect_timeout.count(),
                                    options.max_unauthenticated, options.max_unauthenticated_per_source,
                                    options.refusal_log_window.count()));
  }
  io::result<io::tcp_listener> listener = io::tcp_listener::listen(listen_on);
  if (!listener) co_return std::move(listener).error();
  auto core = std::make_unique<transport_core>(std::move(listener).value(), std::move(options));
  co_return std::unique_ptr<tcp_transport>(new tcp_transport(std::move(core)));
}

io::address tcp_transport::local_address() const { return core_->local; }
runtime::executor& tcp_transport::home() const noexcept { return *core_->home; }

void tcp_transport::serve_partition(std::uint64_t partition_id, result_partition& partition) {
  runtime::executor* ex = runtime::executor::current();
  assert(ex != nullptr && "serve_partition off an executor");
  core_->home->post([core = core_.get(), partition_id, p = &partition, ex] { core->on_serve(partition_id, p, ex); });
}

remote_input& tcp_transport::open_input(io::address peer, std::uint64_t partition_id, std::uint32_t subpartition,
                                        input_gate& gate, std::uint32_t gate_channel) {
  runtime::executor* ex = runtime::executor::current();
  assert(ex != nullptr && gate.on_owner() && "open_input off the gate's executor");
  remote_input& input = core_->make_input(gate, gate_channel, *ex);
  core_->home->post([core = core_.get(), in = &input, peer, partition_id, subpartition] {
    core->on_open_input(in, peer, partition_id, subpartition);
  });
  return input;
}

runtime::task<void> tcp_transport::close() { return core_->close(); }
void tcp_transport::expect_close() noexcept { core_->peers_closing = true; }
transport_stats tcp_transport::stats() const { return core_->stats; }
std::size_t tcp_transport::connections() const { return core_->connections.size(); }

namespace detail {

// --- remote_output (the partition's executor) -----------------------------------------------------

void remote_output::send(buffer_view view, bool priority, std::size_t backlog) {
  core->home->post([core = core, self = this, v = std::move(view), priority, backlog]() mutable {
    core->on_output(self, std::move(v), priority, backlog);
  });
}

runtime::task<void> transport_core::wait_all_closed() { co_await all_closed_.wait(); }

// --- transport_core ---------------------------------------------------------------------------------

connection::connection(std::uint64_t id_, io::address peer_, bool dialed_, const transport_options& options)
    : id(id_),
      peer(peer_),
      dialed(dialed_),
      decoder_config({.max_payload_bytes = options.max_frame_payload_bytes,
                      .max_channels = options.max_channels_per_connection}),
      next_wire_channel(dialed_ ? 0 : 1) {}

transport_core::transport_core(io::tcp_listener l, transport_options o)
    : home(runtime::executor::current()),
      options(o),
      identity{o.job_name.str(), o.epoch, o.node_id.str(), o.secret.vec()},
      listener(std::move(l)),
      refusal_log_(o.refusal_log_lines, o.refusal_log_window) {
  assert(home != nullptr && "tcp_transport::start off an executor");
  local = listener.local_address();
  service_.spawn(accept_loop());
  service_.spawn(housekeeping());
}

transport_core::~transport_core() {
  assert((joined_ || connections.empty()) && "tcp_transport destroyed without close()");
}

remote_input& transport_core::make_input(input_gate& gate, std::uint32_t gate_channel,
                                         runtime::executor& gate_executor) {
  // inputs_ is touched off home here: make_input runs on the gate's executor. Guard it by posting.
  auto* input = new remote_input(this, gate, gate_channel, gate_executor);
  home->post([this, input] { inputs_.emplace_back(input); });
  return *input;
}

connection* transport_core::find(std::uint64_t id) {
  auto it = connections.find(id);
  return it == connections.end() ? nullptr : it->second.get();
}

runtime::task<void> transport_core::housekeeping() {
  for (;;) {
    const bool slept = co_await runtime::sleep_for(std::chrono::milliseconds(100));
    if (!slept || closing) co_return;
    log_refusal_summaries(false);
    const auto now = runtime::executor::current()->now();
    std::vector<pending_request> keep;
    for (pending_request& p : pending_) {
      if (p.deadline > now) {
        keep.push_back(p);
        continue;
      }
      connection* c = find(p.connection_id);
      if (c == nullptr || c->failed) continue;
      runtime::log::warn("tcp transport: {} requested partition {} subpartition {}, which is not served here; "
                         "refusing channel {} after {} ms",
                         c->peer.to_string(), p.request.partition_id, p.request.subpartition_index, p.wire_channel,
                         options.partition_request_timeout.count());
      c->out[p.wire_channel];  // so cancel_output finds the channel's sequence
      cancel_output(*c, p.wire_channel, true);
    }
    pending_.swap(keep);
  }
}

void transport_core::fail(connection& c, std::string why, bool tell_peer, bool orderly_end, bool logged) {
  if (c.failed) return;
  c.failed = true;
  c.failure = why;
  c.hello_stop.request_stop();  // a hello in progress ends now
  // Our own close(), or a peer closing an idle connection, is an orderly end; anything else is a
  // failure worth a line (after a job failed, close() would otherwise log every connection).
  const bool orderly = closing || peers_closing || (c.in.empty() && c.out.empty() && orderly_end);
  const std::string line = fmt::format("connection {} {}: {}", c.dialed ? "to" : "from", c.peer.to_string(), why);
  if (logged) {
    // refused() logged and counted it already
  } else if (orderly) {
    runtime::log::info("tcp transport: {}", line);
  } else {
    ++stats.connections_failed;
    runtime::log::error("tcp transport: {}", line);
    if (stats.recent_failures.size() == 16) stats.recent_failures.erase(stats.recent_failures.begin());
    stats.recent_failures.push_back(line);
  }
  std::vector<std::uint32_t> wires;
  for (auto& [wire, ch] : c.in) wires.push_back(wire);
  const std::string message = fmt::format("connection {} {} failed: {}", c.dialed ? "to" : "from",
                                          c.peer.to_string(), why);
  for (std::uint32_t wire : wires) close_input(c, wire, message);
  wires.clear();
  for (auto& [wire, ch] : c.out) wires.push_back(wire);
  for (std::uint32_t wire : wires) cancel_output(c, wire, false);
  c.queue.clear();  // the views go home
  if (tell_peer && c.up) enqueue_control(c, encode_close(why));
  c.queue_ready.set();  // the writer sends the close frame, if any, and shuts the socket
}

runtime::task<void> transport_core::close() {
  if (joined_) co_return;
  closing = true;
  for (auto& [id, c] : connections) fail(*c, "tcp transport closed", true);
  pending_.clear();
  service_.request_stop();
  co_await service_.join();
  if (!connections.empty()) {
    const bool all = co_await runtime::with_timeout(wait_all_closed(), std::chrono::seconds(2));
    if (!all) connection_tasks_.request_stop();  // a peer that does not read: cancel the sends
  }
  co_await connection_tasks_.join();
  (void)co_await listener.close();
  log_refusal_summaries(true);  // every refusal is in a line or a summary, also those of the last window
  joined_ = true;
}

}  // namespace detail
}  // namespace sluice::buffers
