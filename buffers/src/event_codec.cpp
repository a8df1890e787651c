#include <sluice/buffers/event_codec.hpp>
#include <sluice/buffers/result_partition.hpp>

#include <cassert>

namespace sluice::buffers {

namespace {
constexpr std::byte barrier_tag{0xE1};
constexpr std::byte cancellation_tag{0xE2};
constexpr std::byte end_of_data_tag{0xE3};
constexpr std::byte watermark_tag{0xE4};
constexpr std::byte announcement_tag{0xE5};
constexpr std::byte custom_tag{0xEF};
}  // namespace

std::size_t encode_event(const gate_event& event, std::span<std::byte> out) noexcept {
  assert(out.size() >= max_event_bytes);
  switch (event.kind) {
    case gate_event::type::end_of_partition:
      out[0] = end_of_partition_tag;
      return 1;
    case gate_event::type::barrier: out[0] = barrier_tag; break;
    case gate_event::type::cancellation_marker: out[0] = cancellation_tag; break;
    case gate_event::type::custom: out[0] = custom_tag; break;
    case gate_event::type::end_of_data: out[0] = end_of_data_tag; break;
    case gate_event::type::watermark: out[0] = watermark_tag; break;
    case gate_event::type::barrier_announcement: out[0] = announcement_tag; break;
    case gate_event::type::channel_failed:
      assert(false && "channel_failed is made by a receiver; it never travels");
      out[0] = custom_tag;
      break;
  }
  for (std::size_t i = 0; i < 8; ++i) out[1 + i] = static_cast<std::byte>(event.id >> (8 * i));
  return max_event_bytes;
}

std::optional<gate_event> decode_event(std::span<const std::byte> bytes) noexcept {
  if (bytes.size() == 1 && bytes[0] == end_of_partition_tag) return gate_event{gate_event::type::end_of_partition, 0};
  if (bytes.size() != max_event_bytes) return std::nullopt;
  gate_event event;
  if (bytes[0] == barrier_tag) {
    event.kind = gate_event::type::barrier;
  } else if (bytes[0] == cancellation_tag) {
    event.kind = gate_event::type::cancellation_marker;
  } else if (bytes[0] == end_of_data_tag) {
    event.kind = gate_event::type::end_of_data;
  } else if (bytes[0] == watermark_tag) {
    event.kind = gate_event::type::watermark;
  } else if (bytes[0] == announcement_tag) {
    event.kind = gate_event::type::barrier_announcement;
  } else if (bytes[0] == custom_tag) {
    event.kind = gate_event::type::custom;
  } else {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < 8; ++i) event.id |= std::uint64_t{std::to_integer<std::uint8_t>(bytes[1 + i])} << (8 * i);
  return event;
}

buffer_view fill_event_buffer(buffer& b, const gate_event& event) {
  b.set_kind(buffer_kind::event);
  b.commit(encode_event(event, b.writable()));
  return b.retain();
}

std::optional<buffer_view> make_event_buffer(local_buffer_pool& pool, const gate_event& event) {
  std::optional<buffer> b = pool.try_request();
  if (!b) return std::nullopt;
  return fill_event_buffer(*b, event);
}

runtime::task<std::optional<buffer_view>> request_event_buffer(local_buffer_pool* pool, gate_event event) {
  std::optional<buffer> b = co_await pool->request();
  if (!b) co_return std::nullopt;
  co_return fill_event_buffer(*b, event);
}

}  // namespace sluice::buffers
