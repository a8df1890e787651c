#pragma once
// How a gate_event travels in an event buffer (in a partition's queue, in a local message, in an
// event frame): one tag byte, then the event's id as u64 little-endian where it has one.
//
//   0xE0                 end-of-partition (result_partition::finish() writes it)
//   0xE1 id              checkpoint barrier
//   0xE2 id              cancellation marker
//   0xE3 0               end of data (the last record has been sent)
//   0xE4 time            watermark
//   0xEF id              custom
//
// decode_event() rejects anything else (a wrong length, an unknown tag) with nullopt, so a peer's
// bad event is a named fault, never a guess. channel_failed never travels: a receiver makes it.

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <optional>
#include <span>

namespace sluice::buffers {

inline constexpr std::size_t max_event_bytes = 9;

// Writes `event` into `out` (at least max_event_bytes); returns the bytes written.
std::size_t encode_event(const gate_event& event, std::span<std::byte> out) noexcept;
std::optional<gate_event> decode_event(std::span<const std::byte> bytes) noexcept;

// Makes the empty buffer `b` an event buffer holding `event`; yields a view of it.
buffer_view fill_event_buffer(buffer& b, const gate_event& event);
// An event buffer holding `event`, drawn from `pool` (nullopt if it has no free buffer right now).
std::optional<buffer_view> make_event_buffer(local_buffer_pool& pool, const gate_event& event);
// The same, waiting for a free buffer; nullopt if the waiter was stopped or the pool closed.
runtime::task<std::optional<buffer_view>> request_event_buffer(local_buffer_pool* pool, gate_event event);

}  // namespace sluice::buffers
