#include <sluice/buffers/crc32c.hpp>
#include <sluice/snapshot/state_file.hpp>

#include <fmt/format.h>

#include <cassert>
#include <cstring>

namespace sluice::snapshot {

namespace {

constexpr std::array<std::byte, 4> file_magic = {std::byte{'S'}, std::byte{'L'}, std::byte{'S'}, std::byte{'T'}};

void store_le(std::byte* p, std::uint64_t value, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(value >> (8 * i));
}
std::uint64_t load_le(const std::byte* p, std::size_t bytes) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}

io::error format_error(std::string_view what, std::string_view fault) {
  return io::error(std::make_error_code(std::errc::bad_message), fmt::format("{}: {}", what, fault));
}

}  // namespace

std::string state_file_name(task_id task) { return fmt::format("task-{}.state", task); }

std::array<std::byte, state_file_header_bytes> encode_file_header(const state_file_header& header) noexcept {
  std::array<std::byte, state_file_header_bytes> out{};
  std::memcpy(out.data(), file_magic.data(), file_magic.size());
  store_le(out.data() + 4, state_file_version, 2);
  store_le(out.data() + 8, header.checkpoint, 8);
  store_le(out.data() + 16, header.task, 4);
  store_le(out.data() + 28, buffers::crc32c({out.data(), 28}), 4);
  return out;
}

std::array<std::byte, state_record_header_bytes> encode_record_header(const state_record_header& header) noexcept {
  assert(header.payload_bytes <= max_record_payload_bytes);
  std::array<std::byte, state_record_header_bytes> out{};
  out[0] = static_cast<std::byte>(header.type);
  store_le(out.data() + 2, header.group, 2);
  store_le(out.data() + 4, header.index, 4);
  store_le(out.data() + 8, header.payload_bytes, 4);
  store_le(out.data() + 12, header.payload_crc, 4);
  store_le(out.data() + 16, header.sequence, 4);
  store_le(out.data() + 20, buffers::crc32c({out.data(), 20}), 4);
  return out;
}

std::array<std::byte, state_end_payload_bytes> encode_end_payload(const state_end_payload& end) noexcept {
  std::array<std::byte, state_end_payload_bytes> out{};
  store_le(out.data(), end.records, 8);
  store_le(out.data() + 8, end.payload_bytes, 8);
  return out;
}

io::result<state_file_header> decode_file_header(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() < state_file_header_bytes) {
    return format_error(what, fmt::format("file header cut short ({} of {} bytes)", bytes.size(),
                                          state_file_header_bytes));
  }
  if (std::memcmp(bytes.data(), file_magic.data(), file_magic.size()) != 0) {
    return format_error(what, "bad magic (not a sluice state file)");
  }
  if (load_le(bytes.data() + 28, 4) != buffers::crc32c(bytes.first(28))) {
    return format_error(what, "file header checksum mismatch");
  }
  if (const auto version = load_le(bytes.data() + 4, 2); version != state_file_version) {
    return format_error(what, fmt::format("unsupported state file version {} (this build reads {})", version,
                                          state_file_version));
  }
  // Reserved bytes are 0 in every file this version writes; anything else is not this format.
  if (load_le(bytes.data() + 6, 2) != 0 || load_le(bytes.data() + 20, 8) != 0) {
    return format_error(what, "reserved file header bytes (6..7, 20..27) are not 0");
  }
  return state_file_header{load_le(bytes.data() + 8, 8), static_cast<task_id>(load_le(bytes.data() + 16, 4))};
}

io::result<state_record_header> decode_record_header(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() < state_record_header_bytes) {
    return format_error(what, fmt::format("record header cut short ({} of {} bytes)", bytes.size(),
                                          state_record_header_bytes));
  }
  if (load_le(bytes.data() + 20, 4) != buffers::crc32c(bytes.first(20))) {
    return format_error(what, "record header checksum mismatch");
  }
  const auto type = std::to_integer<std::uint8_t>(bytes[0]);
  if (type < 1 || type > 5) return format_error(what, fmt::format("unknown record type {}", type));
  if (const auto reserved = std::to_integer<std::uint8_t>(bytes[1]); reserved != 0) {
    return format_error(what, fmt::format("reserved record header byte 1 is {} (not 0)", reserved));
  }
  state_record_header h;
  h.type = static_cast<record_type>(type);
  h.group = static_cast<std::uint16_t>(load_le(bytes.data() + 2, 2));
  h.index = static_cast<std::uint32_t>(load_le(bytes.data() + 4, 4));
  h.payload_bytes = static_cast<std::uint32_t>(load_le(bytes.data() + 8, 4));
  h.payload_crc = static_cast<std::uint32_t>(load_le(bytes.data() + 12, 4));
  h.sequence = static_cast<std::uint32_t>(load_le(bytes.data() + 16, 4));
  if (h.payload_bytes > max_record_payload_bytes) {
    return format_error(what, fmt::format("record payload length {} above the limit {}", h.payload_bytes,
                                          max_record_payload_bytes));
  }
  if (h.type == record_type::end && h.payload_bytes != state_end_payload_bytes) {
    return format_error(what, fmt::format("end record payload length {} (expected {})", h.payload_bytes,
                                          state_end_payload_bytes));
  }
  if (h.type == record_type::operator_base && h.payload_bytes != state_operator_base_payload_bytes) {
    return format_error(what, fmt::format("operator base record payload length {} (expected {})", h.payload_bytes,
                                          state_operator_base_payload_bytes));
  }
  return h;
}

std::array<std::byte, state_operator_base_payload_bytes> encode_operator_base_payload(checkpoint_id base) noexcept {
  std::array<std::byte, state_operator_base_payload_bytes> out{};
  store_le(out.data(), base, 8);
  return out;
}

io::result<checkpoint_id> decode_operator_base_payload(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() != state_operator_base_payload_bytes) {
    return format_error(what, fmt::format("operator base record payload of {} bytes (expected {})", bytes.size(),
                                          state_operator_base_payload_bytes));
  }
  return checkpoint_id{load_le(bytes.data(), 8)};
}

io::result<state_end_payload> decode_end_payload(std::span<const std::byte> bytes, std::string_view what) {
  if (bytes.size() != state_end_payload_bytes) {
    return format_error(what, fmt::format("end record payload of {} bytes (expected {})", bytes.size(),
                                          state_end_payload_bytes));
  }
  return state_end_payload{load_le(bytes.data(), 8), load_le(bytes.data() + 8, 8)};
}

}  // namespace sluice::snapshot
