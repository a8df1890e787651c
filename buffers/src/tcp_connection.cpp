// The loops of one transport connection, on the home executor: the reader decodes frames and
// receives buffer payloads straight into buffers lent by the gate; the writer gathers queued frames
// into batches and sends them. See tcp_transport.hpp for the protocol.
#include "transport_core.hpp"

#include <sluice/buffers/event_codec.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/when_all.hpp>

#include <fmt/core.h>

#include <cassert>
#include <cstring>

namespace sluice::buffers::detail {

runtime::task<void> transport_core::run_connection(connection* c) {
  if (!c->failed && c->up) co_await runtime::when_all(reader(c), writer(c));
  (void)co_await c->stream.close();
  if (auto it = dialed_.find(c->peer.to_string()); it != dialed_.end() && it->second == c->id) dialed_.erase(it);
  if (auto it = by_node_.find(c->peer_node); it != by_node_.end() && it->second == c->id) by_node_.erase(it);
  // A dialed connection retired after its channels moved to another keeps the address pointing there.
  for (auto it = dialed_.begin(); it != dialed_.end();) it = it->second == c->id ? dialed_.erase(it) : std::next(it);
  connections.erase(c->id);  // destroys *c
  if (connections.empty()) all_closed_.set();
}

runtime::task<void> transport_core::writer(connection* c) {
  const std::size_t capacity = options.send_batch_bytes + options.max_frame_payload_bytes + frame_header_bytes;
  // Not zeroed: a connection's pages are touched only as far as its batches reach (with thousands of
  // connections between many executors, zeroing them all cost gigabytes of resident memory).
  auto staging = std::make_unique_for_overwrite<std::byte[]>(capacity);
  for (;;) {
    if (c->queue.empty()) {
      if (c->failed) break;
      c->queue_ready.reset();
      const bool woke = co_await c->queue_ready.wait();
      if (!woke) break;
      continue;
    }
    std::size_t size = 0;
    std::size_t frames = 0;
    while (!c->queue.empty()) {
      connection::outgoing& item = c->queue.front();
      const std::size_t bytes = item.is_control ? item.control.size_bytes : frame_header_bytes + item.payload.size();
      if (size > 0 && size + bytes > options.send_batch_bytes) break;
      assert(size + bytes <= capacity);
      if (item.is_control) {
        std::memcpy(staging.get() + size, item.control.storage.data(), item.control.size_bytes);
      } else {
        header_bytes header;
        encode_header(item.header, header);
        std::memcpy(staging.get() + size, header.data(), header.size());
        if (!item.payload.data().empty()) {
          std::memcpy(staging.get() + size + header.size(), item.payload.data().data(), item.payload.size());
        }
      }
      size += bytes;
      ++frames;
      c->queue.pop_front();  // a partition's buffer is released here and goes home
    }
    io::result<void> sent = co_await c->stream.send_all({staging.get(), size});
    if (!sent) {
      fail(*c, sent.error().message(), false);
      break;
    }
    stats.frames_sent += frames;
    stats.bytes_sent += size;
  }
  (void)co_await c->stream.shutdown(SHUT_RDWR);  // wakes the reader
}

runtime::task<void> transport_core::reader(connection* c) {
  // Not zeroed, as the writer's staging.
  auto chunk_storage = std::make_unique_for_overwrite<std::byte[]>(options.receive_chunk_bytes);
  std::span<std::byte> chunk(chunk_storage.get(), options.receive_chunk_bytes);
  std::size_t begin = 0;
  std::size_t end = 0;
  while (!c->failed) {
    std::span<const std::byte> input(chunk.data() + begin, end - begin);
    const decode_step step = c->decoder->next(input);
    begin = end - input.size();
    if (step == decode_step::need_input) {
      assert(begin == end);  // the decoder keeps a partial header itself
      begin = end = 0;
      io::result<std::size_t> got = co_await c->stream.recv({chunk.data(), chunk.size()});
      if (c->failed) break;
      if (!got) {
        fail(*c, got.error().message(), false);
        break;
      }
      if (got.value() == 0) {
        io::result<void> at_boundary = c->decoder->finish();
        fail(*c, at_boundary ? std::string("the peer closed the connection") : at_boundary.error().message(), false,
             at_boundary.ok());
        break;
      }
      end = got.value();
      stats.bytes_received += end;
      continue;
    }
    if (step == decode_step::failed) {
      fail(*c, c->decoder->error().message(), true);
      break;
    }
    ++stats.frames_received;
    if (step == decode_step::control) {
      handle_control(*c, c->decoder->control());
      continue;
    }
    const bool ok = co_await receive_payload(c, &chunk, &begin, &end);
    if (!ok) break;
  }
}

runtime::task<bool> transport_core::receive_rest(connection* c, std::span<std::byte> payload) {
  while (c->decoder->payload_remaining_bytes() > 0) {
    const std::size_t at = c->decoder->payload_received_bytes();
    io::result<std::size_t> got = co_await c->stream.recv(payload.subspan(at, payload.size() - at));
    if (c->failed) co_return false;
    if (!got) {
      fail(*c, got.error().message(), false);
      co_return false;
    }
    if (got.value() == 0) {
      io::result<void> truncated = c->decoder->finish();
      fail(*c, truncated ? std::string("the peer closed the connection") : truncated.error().message(), false);
      co_return false;
    }
    c->decoder->payload_received(got.value());
    stats.bytes_received += got.value();
  }
  co_return true;
}

namespace {
std::string protocol_fault(const connection& c, const frame_header& h, std::string_view what) {
  return fmt::format("protocol violation at stream byte {}: {} frame on channel {}: {}",
                     c.decoder->stream_offset_bytes(), to_string(h.type), h.channel_id, what);
}
}  // namespace

runtime::task<bool> transport_core::receive_payload(connection* c, std::span<std::byte>* chunk, std::size_t* begin,
                                                    std::size_t* end) {
  const frame_header h = c->decoder->header();
  std::span<const std::byte> input(chunk->data() + *begin, *end - *begin);
  auto it = c->in.find(h.channel_id);
  const bool live = it != c->in.end() && !it->second.cancel_sent;

  if (h.type == frame_type::buffer && live) {
    connection::in_channel& ch = it->second;
    if (ch.lent.empty()) {
      fail(*c, protocol_fault(*c, h, "no credit was granted for it"), true);
      co_return false;
    }
    if (h.payload_bytes > ch.lent.front().get().remaining()) {
      fail(*c, protocol_fault(*c, h, fmt::format("{} bytes exceed the receiving buffer of {} bytes", h.payload_bytes,
                                                 ch.lent.front().get().remaining())),
           true);
      co_return false;
    }
    remote_input* in = ch.input;
    gate_buffer slot = std::move(ch.lent.front());
    ch.lent.pop_front();
    std::span<std::byte> into = slot.get().writable().first(h.payload_bytes);
    c->decoder->take_payload(input, into);
    *begin = *end - input.size();
    const bool received = co_await receive_rest(c, into);  // straight into the gate's buffer
    // The channel may have closed meanwhile; the slot goes back to the gate either way.
    auto now = c->in.find(h.channel_id);
    const std::uint32_t backlog = now != c->in.end() ? now->second.last_backlog : 0;
    if (received) slot.get().commit(h.payload_bytes);
    const bool deliver = received && now != c->in.end() && !now->second.cancel_sent;
    in->gate_executor_->post([in, s = std::move(slot), backlog, deliver]() mutable {
      if (deliver) in->gate_->deliver(std::move(s), backlog);
    });
    co_return received;
  }

  if (h.type == frame_type::event && h.payload_bytes > max_event_bytes) {
    fail(*c, protocol_fault(*c, h, fmt::format("an event payload of {} bytes (events have at most {})",
                                               h.payload_bytes, max_event_bytes)),
         true);
    co_return false;
  }
  // An event, or a buffer for a channel this side already cancelled (its bytes are dropped).
  c->scratch.resize(h.payload_bytes);
  c->decoder->take_payload(input, c->scratch);
  *begin = *end - input.size();
  const bool received = co_await receive_rest(c, c->scratch);
  if (!received) co_return false;
  if (h.type == frame_type::buffer) co_return true;

  const std::optional<gate_event> event = decode_event(c->scratch);
  if (!event) {
    fail(*c, protocol_fault(*c, h, fmt::format("the event payload (tag {:#04x}, {} bytes) does not decode",
                                               std::to_integer<unsigned>(c->scratch.at(0)), c->scratch.size())),
         true);
    co_return false;
  }
  it = c->in.find(h.channel_id);
  if (it == c->in.end() || it->second.cancel_sent) co_return true;
  connection::in_channel& ch = it->second;
  remote_input* in = ch.input;
  const bool priority = (h.flags & frame_flags::priority) != 0;
  in->gate_executor_->post([core = this, in, e = *event, priority] {
    const bool queued = in->gate_->deliver_event(in->gate_channel_, e, priority);
    if (!queued && in->gate_->failed(in->gate_channel_) && !in->gate_refused_) {
      in->gate_refused_ = true;  // the gate failed the channel (its event bound): cancel it, once
      core->home->post([core, in, why = in->gate_->failure(in->gate_channel_)] { core->on_gate_refused(in, why); });
    }
  });
  if (event->kind == gate_event::type::end_of_partition) {
    // The sender is done: end the channel with the cancel handshake (frame.hpp).
    enqueue_control(*c, encode_cancel(h.channel_id, ch.next_sequence++));
    ch.cancel_sent = true;
  }
  co_return true;
}

void transport_core::handle_control(connection& c, const control_frame& frame) {
  const std::uint32_t wire = frame.header.channel_id;
  if (const auto* request = std::get_if<partition_request>(&frame.payload)) {
    if ((wire & 1u) == (c.dialed ? 0u : 1u)) {
      // The peer opened a channel in this side's id space (frame.hpp: the side that connected uses
      // even ids): this side's next input would collide with it.
      fail(c, protocol_fault(c, frame.header, fmt::format("channel {} is in this side's id space (the side that "
                                                          "connected uses even ids, the other odd ones)",
                                                          wire)),
           true);
      return;
    }
    accept_request(c, wire, *request);
  } else if (const auto* credit = std::get_if<add_credit>(&frame.payload)) {
    auto it = c.out.find(wire);
    if (it == c.out.end() || it->second.output == nullptr) return;  // refused or waiting for its partition
    remote_output* out = it->second.output;
    out->executor->post([out, n = credit->credits] {
      if (out->sender) out->sender->add_credit(n);
    });
  } else if (const auto* backlog = std::get_if<backlog_announcement>(&frame.payload)) {
    auto it = c.in.find(wire);
    if (it == c.in.end() || it->second.cancel_sent) return;
    it->second.last_backlog = backlog->backlog_buffers;
    remote_input* in = it->second.input;
    in->gate_executor_->post([in, n = backlog->backlog_buffers] { in->gate_->note_sender_backlog(in->gate_channel_, n); });
  } else if (std::holds_alternative<cancel_channel>(frame.payload)) {
    if (auto it = c.in.find(wire); it != c.in.end()) {
      std::optional<std::string> failure;
      if (!it->second.cancel_sent) {
        failure = fmt::format("{} refused channel {} (partition {} subpartition {}): it is not served there, or "
                              "another channel took it",
                              c.peer.to_string(), wire, it->second.partition_id, it->second.subpartition);
      }
      close_input(c, wire, std::move(failure));
    } else if (c.out.count(wire) != 0) {
      cancel_output(c, wire, true);  // the receiver gave up or finished: answer
    } else {
      // A request still waiting for its partition, given up by the peer.
      std::erase_if(pending_, [&](const pending_request& p) { return p.connection_id == c.id && p.wire_channel == wire; });
      enqueue_control(c, encode_cancel(wire, 0));
    }
  } else if (const auto* closing_frame = std::get_if<close_connection>(&frame.payload)) {
    fail(c, fmt::format("the peer closed the connection: {}", closing_frame->reason), false, true);
  }
}

}  // namespace sluice::buffers::detail
