// tcp_transport: the public face, channel set-up and teardown. The connection loops (reading and
// writing frames) are in tcp_connection.cpp.
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
      options.receive_chunk_bytes < max_control_frame_bytes || options.send_batch_bytes == 0) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument),
                        fmt::format("tcp transport: bad options (max frame payload {} bytes, receive chunk {} bytes, "
                                    "send batch {} bytes)",
                                    options.max_frame_payload_bytes, options.receive_chunk_bytes,
                                    options.send_batch_bytes));
  }
  io::result<io::tcp_listener> listener = io::tcp_listener::listen(listen_on);
  if (!listener) co_return std::move(listener).error();
  auto core = std::make_unique<transport_core>(std::move(listener).value(), options);
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
transport_stats tcp_transport::stats() const { return core_->stats; }
std::size_t tcp_transport::connections() const { return core_->connections.size(); }

namespace detail {

// --- remote_output (the partition's executor) -----------------------------------------------------

void remote_output::send(buffer_view view, bool priority, std::size_t backlog) {
  core->home->post([core = core, self = this, v = std::move(view), priority, backlog]() mutable {
    core->on_output(self, std::move(v), priority, backlog);
  });
}

namespace {
runtime::task<void> drive_sender(remote_output* out) { co_await out->sender->run(); }
}  // namespace

runtime::task<void> transport_core::wait_all_closed() { co_await all_closed_.wait(); }

// --- transport_core ---------------------------------------------------------------------------------

connection::connection(std::uint64_t id_, io::address peer_, bool dialed_, const transport_options& options)
    : id(id_),
      peer(peer_),
      dialed(dialed_),
      decoder({.max_payload_bytes = options.max_frame_payload_bytes,
               .max_channels = options.max_channels_per_connection}),
      next_wire_channel(dialed_ ? 0 : 1) {}

transport_core::transport_core(io::tcp_listener l, transport_options o)
    : home(runtime::executor::current()), options(o), listener(std::move(l)) {
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

void transport_core::on_serve(std::uint64_t partition_id, result_partition* partition, runtime::executor* executor) {
  served_partition& served = served_[partition_id];
  served.partition = partition;
  served.executor = executor;
  served.requested.assign(partition->subpartitions(), false);
  // Requests that came early.
  std::vector<pending_request> waiting;
  waiting.swap(pending_);
  for (pending_request& p : waiting) {
    if (p.request.partition_id != partition_id) {
      pending_.push_back(p);
      continue;
    }
    if (connection* c = find(p.connection_id); c != nullptr && !c->failed && c->out.count(p.wire_channel) == 0) {
      accept_request(*c, p.wire_channel, p.request);
    }
  }
}

void transport_core::on_open_input(remote_input* input, io::address peer, std::uint64_t partition_id,
                                   std::uint32_t subpartition) {
  if (closing) {
    close_input_without_connection(input, "tcp transport closed");
    return;
  }
  connection& c = dial(peer);
  const std::uint32_t wire = c.next_wire_channel;
  c.next_wire_channel += 2;
  input->connection_id_ = c.id;
  input->wire_channel_ = wire;
  connection::in_channel& ch = c.in[wire];
  ch.input = input;
  ch.partition_id = partition_id;
  ch.subpartition = subpartition;
  if (c.up) send_partition_request(c, wire, ch);
}

void transport_core::close_input_without_connection(remote_input* input, std::string why) {
  input->gate_executor_->post([input, why = std::move(why)] {
    input->gate_->fail_channel(input->gate_channel_, why);
    input->closed_.set();
  });
}

void transport_core::on_grant(remote_input* input, std::vector<gate_buffer> lent) {
  connection* c = find(input->connection_id_);
  connection::in_channel* found = nullptr;
  if (c != nullptr && !c->failed) {
    auto it = c->in.find(input->wire_channel_);
    if (it != c->in.end() && !it->second.cancel_sent) found = &it->second;
  }
  if (found == nullptr) {
    // The channel is gone: the buffers go back to the gate, on its executor.
    input->gate_executor_->post([l = std::move(lent)]() mutable { l.clear(); });
    return;
  }
  connection::in_channel& ch = *found;
  const auto credits = static_cast<std::uint32_t>(lent.size());
  for (gate_buffer& b : lent) ch.lent.push_back(std::move(b));
  if (!ch.requested) {
    ch.credits_before_request += credits;
    return;
  }
  enqueue_control(*c, encode_add_credit(input->wire_channel_, ch.next_sequence++, add_credit{credits}));
}

void transport_core::on_output(remote_output* output, buffer_view view, bool priority, std::size_t backlog) {
  connection* c = find(output->connection_id);
  if (c == nullptr || c->failed) return;  // the view goes home when dropped
  auto it = c->out.find(output->wire_channel);
  if (it == c->out.end()) return;
  connection::out_channel& ch = it->second;
  const bool data = view.kind() == buffer_kind::data;
  if (data && backlog != ch.last_backlog) {
    ch.last_backlog = backlog;
    enqueue_control(*c, encode_backlog(output->wire_channel, ch.next_sequence++,
                                       backlog_announcement{static_cast<std::uint32_t>(backlog)}));
  }
  connection::outgoing item;
  item.header.type = data ? frame_type::buffer : frame_type::event;
  item.header.flags = (!data && priority) ? frame_flags::priority : 0;
  item.header.channel_id = output->wire_channel;
  item.header.sequence = ch.next_sequence++;
  item.header.payload_bytes = static_cast<std::uint32_t>(view.size());
  item.payload = std::move(view);
  c->queue.push_back(std::move(item));
  c->queue_ready.set();
}

void transport_core::enqueue_control(connection& c, encoded_frame frame) {
  connection::outgoing item;
  item.is_control = true;
  item.control = frame;
  c.queue.push_back(std::move(item));
  c.queue_ready.set();
}

void transport_core::send_partition_request(connection& c, std::uint32_t wire, connection::in_channel& ch) {
  assert(!ch.requested);
  c.decoder.add_channel(wire);
  ch.requested = true;
  enqueue_control(c, encode_partition_request(wire, ch.next_sequence++,
                                              {ch.partition_id, ch.subpartition, ch.credits_before_request}));
  ch.credits_before_request = 0;
}

connection& transport_core::dial(const io::address& peer) {
  const std::string key = peer.to_string();
  if (auto it = dialed_.find(key); it != dialed_.end()) {
    if (connection* c = find(it->second); c != nullptr && !c->failed) return *c;
  }
  auto owned = std::make_unique<connection>(next_connection_id_++, peer, true, options);
  connection& c = *owned;
  dialed_[key] = c.id;
  connections.emplace(c.id, std::move(owned));
  ++stats.connections_dialed;
  connection_tasks_.spawn(dial_and_run(&c));
  return c;
}

runtime::task<void> transport_core::dial_and_run(connection* c) {
  io::result<io::tcp_stream> stream = co_await io::tcp_stream::connect(c->peer);
  if (!stream) {
    fail(*c, stream.error().message(), false);
  } else {
    c->stream = std::move(stream).value();
    (void)c->stream.set_nodelay(true);
    c->up = true;
    for (auto& [wire, ch] : c->in) {
      if (!ch.requested) send_partition_request(*c, wire, ch);
    }
  }
  co_await run_connection(c);
}

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
    (void)stream.set_nodelay(true);
    const io::address peer = stream.peer();
    auto owned = std::make_unique<connection>(next_connection_id_++, peer, false, options);
    connection* c = owned.get();
    c->stream = std::move(stream);
    c->up = true;
    connections.emplace(c->id, std::move(owned));
    ++stats.connections_accepted;
    connection_tasks_.spawn(run_connection(c));
  }
}

runtime::task<void> transport_core::housekeeping() {
  for (;;) {
    const bool slept = co_await runtime::sleep_for(std::chrono::milliseconds(100));
    if (!slept || closing) co_return;
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

void transport_core::accept_request(connection& c, std::uint32_t wire, const partition_request& request) {
  auto it = served_.find(request.partition_id);
  if (it == served_.end()) {
    pending_.push_back({c.id, wire, request, runtime::executor::current()->now() + options.partition_request_timeout});
    return;
  }
  served_partition& served = it->second;
  if (request.subpartition_index >= served.requested.size() || served.requested[request.subpartition_index]) {
    runtime::log::warn("tcp transport: {} requested partition {} subpartition {}: {}; refusing channel {}",
                       c.peer.to_string(), request.partition_id, request.subpartition_index,
                       request.subpartition_index >= served.requested.size() ? "no such subpartition"
                                                                              : "already requested by another channel",
                       wire);
    c.out[wire];
    cancel_output(c, wire, true);
    return;
  }
  start_output(c, wire, served, request);
}

void transport_core::start_output(connection& c, std::uint32_t wire, served_partition& served,
                                  const partition_request& request) {
  served.requested[request.subpartition_index] = true;
  auto* out = new remote_output();
  outputs_.emplace_back(out);
  out->core = this;
  out->executor = served.executor;
  out->connection_id = c.id;
  out->wire_channel = wire;
  c.out[wire].output = out;
  served.executor->post([out, p = served.partition, sub = request.subpartition_index,
                         credits = request.initial_credits] {
    out->sender.emplace(*p, sub, *out);
    if (credits > 0) out->sender->add_credit(credits);
    runtime::executor::current()->spawn(drive_sender(out));
  });
}

void transport_core::cancel_output(connection& c, std::uint32_t wire, bool answer) {
  auto it = c.out.find(wire);
  if (it == c.out.end()) return;
  if (answer && !c.failed) enqueue_control(c, encode_cancel(wire, it->second.next_sequence++));
  if (remote_output* out = it->second.output) {
    out->executor->post([out] {
      if (out->sender) out->sender->cancel();
    });
  }
  c.out.erase(it);
}

void transport_core::close_input(connection& c, std::uint32_t wire, std::optional<std::string> failure) {
  auto it = c.in.find(wire);
  if (it == c.in.end()) return;
  remote_input* input = it->second.input;
  std::vector<gate_buffer> lent;
  for (gate_buffer& b : it->second.lent) lent.push_back(std::move(b));
  c.in.erase(it);
  input->gate_executor_->post([input, l = std::move(lent), f = std::move(failure)]() mutable {
    l.clear();  // back to the gate
    if (f) input->gate_->fail_channel(input->gate_channel_, std::move(*f));
    input->closed_.set();
  });
}

void transport_core::fail(connection& c, std::string why, bool tell_peer, bool orderly_end) {
  if (c.failed) return;
  c.failed = true;
  c.failure = why;
  // Our own close(), or a peer closing an idle connection, is an orderly end; anything else is a
  // failure worth a line (after a job failed, close() would otherwise log every connection).
  const bool orderly = closing || (c.in.empty() && c.out.empty() && orderly_end);
  const std::string line = fmt::format("connection {} {}: {}", c.dialed ? "to" : "from", c.peer.to_string(), why);
  if (orderly) {
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
  joined_ = true;
}

}  // namespace detail
}  // namespace sluice::buffers
