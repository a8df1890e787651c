// tcp_transport's channel table, on the home executor: opening remote inputs, serving partition
// requests, credit, and closing channels (see tcp_transport.hpp for the protocol).
#include "transport_core.hpp"

#include <sluice/buffers/event_codec.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/core.h>

#include <cassert>

namespace sluice::buffers::detail {

namespace {
runtime::task<void> drive_sender(remote_output* out) { co_await out->sender->run(); }
}  // namespace

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

void transport_core::on_gate_refused(remote_input* input, const std::string& why) {
  connection* c = find(input->connection_id_);
  if (c == nullptr || c->failed) return;
  auto it = c->in.find(input->wire_channel_);
  if (it == c->in.end() || it->second.cancel_sent) return;
  connection::in_channel& ch = it->second;
  runtime::log::error("tcp transport: channel {} from {} (partition {} subpartition {}) failed at its gate: {}",
                      input->wire_channel_, c->peer.to_string(), ch.partition_id, ch.subpartition, why);
  // Cancel handshake: the peer stops sending; frames still in flight are dropped (not live).
  if (ch.requested) {
    enqueue_control(*c, encode_cancel(input->wire_channel_, ch.next_sequence++));
    ch.cancel_sent = true;
    std::vector<gate_buffer> lent;
    for (gate_buffer& b : ch.lent) lent.push_back(std::move(b));
    ch.lent.clear();
    input->gate_executor_->post([l = std::move(lent)]() mutable { l.clear(); });
  } else {
    close_input(*c, input->wire_channel_, std::nullopt);
  }
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
  // A channel the table cannot take fails alone: the connection and its other channels carry on.
  std::string refused;
  if (wire == connection_channel_id || c.decoder->channels().find(wire) != nullptr) {
    refused = fmt::format("channel id {} is not free on the connection", wire);
  } else if (c.decoder->channels().size() == c.decoder->channels().max_channels()) {
    refused = fmt::format("all {} channels of the connection are open (transport_options::"
                          "max_channels_per_connection)",
                          c.decoder->channels().max_channels());
  }
  if (!refused.empty()) {
    const std::string why = fmt::format("cannot open channel for partition {} subpartition {} to {}: {}",
                                        ch.partition_id, ch.subpartition, c.peer.to_string(), refused);
    runtime::log::error("tcp transport: {}", why);
    close_input(c, wire, why);
    return;
  }
  c.decoder->add_channel(wire);
  ch.requested = true;
  enqueue_control(c, encode_partition_request(wire, ch.next_sequence++,
                                              {ch.partition_id, ch.subpartition, ch.credits_before_request}));
  ch.credits_before_request = 0;
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

}  // namespace sluice::buffers::detail
