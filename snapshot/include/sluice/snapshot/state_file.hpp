#pragma once
// The on-disk format of one task's state in a checkpoint: `chk-<id>/task-<task id>.state`. The
// channel-state writer appends records to it with io_uring writes while the task runs on; storage
// lists it in the manifest (size and CRC32C of the whole file) and the reader validates it.
//
// All integers little-endian. Reserved bytes are 0; a reader rejects a header where they are not.
//
// File header, 32 bytes:
//    0  4  magic "SLST"
//    4  2  version, 1
//    6  2  reserved, 0
//    8  8  checkpoint id
//   16  4  task id
//   20  8  reserved, 0
//   28  4  CRC32C of bytes 0..27
//
// Then records, each a 24-byte header followed by `payload bytes` of payload:
//    0  1  record type (record_type)
//    1  1  reserved, 0
//    2  2  group: the input gate index (input_channel), the partition index (output_channel), else 0
//    4  4  index: the operator index (operator_state), channel or subpartition index (channel state)
//    8  4  payload bytes, at most max_record_payload_bytes
//   12  4  CRC32C of the payload
//   16  4  sequence: the record's position in the file, 0, 1, 2, ...
//   20  4  CRC32C of bytes 0..19
//
// Records of one (type, group, index) concatenate in file order: the channel state of input channel
// (g, c) is the payloads of its input_channel records one after another (each is one captured
// buffer's bytes: whole serialized records, or parts of records that span buffers). Records of
// different channels may interleave. The file ends with exactly one `end` record whose 16-byte
// payload is: records before it u64, payload bytes before it u64. Nothing follows it, so a file cut
// anywhere is detected.
//
// Incremental checkpoints: an operator_base record (at most one per operator, group 0, payload
// exactly 8 bytes: a checkpoint id u64, above 0 and below this file's checkpoint) says that
// operator's operator_state in this file is a delta on its state in the same task's file of that
// earlier checkpoint, which may itself be a delta: recovery restores the chain's full state first,
// then each delta, oldest first. Its payload counts as neither operator nor channel state bytes
// (the end record's payload count includes it).

#include <sluice/io/result.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace sluice::snapshot {

inline constexpr std::size_t state_file_header_bytes = 32;
inline constexpr std::size_t state_record_header_bytes = 24;
inline constexpr std::size_t state_end_payload_bytes = 16;
inline constexpr std::size_t state_operator_base_payload_bytes = 8;
inline constexpr std::uint16_t state_file_version = 1;
inline constexpr std::uint32_t max_record_payload_bytes = 64u * 1024 * 1024;

enum class record_type : std::uint8_t {
  operator_state = 1,
  input_channel = 2,
  output_channel = 3,
  end = 4,
  // An operator's keyed state in this file is a delta on its state in an earlier checkpoint of the
  // same task (docs/state.md, incremental checkpoints): index the operator, payload 8 bytes, the
  // base checkpoint's id (u64), below this file's checkpoint. At most one per operator.
  operator_base = 5,
};

struct state_file_header {
  checkpoint_id checkpoint = no_checkpoint;
  task_id task = 0;
  friend bool operator==(const state_file_header&, const state_file_header&) = default;
};

struct state_record_header {
  record_type type = record_type::operator_state;
  std::uint16_t group = 0;
  std::uint32_t index = 0;
  std::uint32_t payload_bytes = 0;
  std::uint32_t payload_crc = 0;
  std::uint32_t sequence = 0;
  friend bool operator==(const state_record_header&, const state_record_header&) = default;
};

struct state_end_payload {
  std::uint64_t records = 0;
  std::uint64_t payload_bytes = 0;
};

// "task-<id>.state"
std::string state_file_name(task_id task);

std::array<std::byte, state_file_header_bytes> encode_file_header(const state_file_header& header) noexcept;
// header.payload_bytes <= max_record_payload_bytes (asserted).
std::array<std::byte, state_record_header_bytes> encode_record_header(const state_record_header& header) noexcept;
std::array<std::byte, state_end_payload_bytes> encode_end_payload(const state_end_payload& end) noexcept;
// An operator_base record's payload: the base checkpoint's id.
std::array<std::byte, state_operator_base_payload_bytes> encode_operator_base_payload(checkpoint_id base) noexcept;

// Each fails with an error naming the fault ("bad magic", "header checksum mismatch", "unknown
// record type 9", "payload length 70000000 above the limit"); `what` prefixes the message (the
// file's path, say). They check the header alone; the payload's CRC is the caller's to check.
io::result<state_file_header> decode_file_header(std::span<const std::byte> bytes, std::string_view what);
io::result<state_record_header> decode_record_header(std::span<const std::byte> bytes, std::string_view what);
io::result<state_end_payload> decode_end_payload(std::span<const std::byte> bytes, std::string_view what);
// The base id as stored (whether it is a valid base for the file is the parser's to check).
io::result<checkpoint_id> decode_operator_base_payload(std::span<const std::byte> bytes, std::string_view what);

}  // namespace sluice::snapshot
