#pragma once
// Helpers for the channel-state writer tests: captured buffers with known bytes, driving the test
// backend by hand, and a minimal state-file reader built on state_file.hpp's decoders.

#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/crc32c.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/snapshot/state_file.hpp>

#include <support/backends.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::test {

// `size` bytes derived from `seed`, so every captured buffer has recognisable content.
inline std::vector<std::byte> pattern_bytes(std::size_t size, std::uint32_t seed) {
  std::vector<std::byte> bytes(size);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : bytes) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 16);
  }
  return bytes;
}

// One captured buffer: a segment holding `bytes`, handed over as a view (the handle is dropped, as
// the task does when it moves on). On the pool's executor.
inline buffers::buffer_view captured(buffers::local_buffer_pool& pool, const std::vector<std::byte>& bytes,
                                     buffers::buffer_kind kind = buffers::buffer_kind::data) {
  std::optional<buffers::buffer> b = pool.try_request();
  if (!b) throw std::runtime_error("test pool exhausted");
  b->append(bytes);
  b->set_kind(kind);
  return b->retain();  // the handle `b` goes out of scope: the view holds the segment
}

inline std::vector<buffers::buffer_view> captured_n(buffers::local_buffer_pool& pool, std::size_t count,
                                                    std::uint32_t seed, std::size_t size_bytes = 100) {
  std::vector<buffers::buffer_view> views;
  for (std::size_t i = 0; i < count; ++i) views.push_back(captured(pool, pattern_bytes(size_bytes, seed + i)));
  return views;
}

// A test backend the test drives by hand, with one coroutine resumed per executor turn, so that
// every co_await yield() is one turn: completions the test made are delivered within a few.
inline runtime::executor_options hand_driven(runtime::test_backend*& backend) {
  runtime::executor_options options = test_backend_options(backend);
  options.batch_limit = 1;
  return options;
}

// Lets the executor run other coroutines and deliver completions, `turns` times.
inline runtime::task<void> turns(int count) {
  for (int i = 0; i < count; ++i) co_await runtime::yield();
}

// The oldest pending operation with this code that the test may complete (not the runtime's own).
inline runtime::io_op* pending_op(runtime::test_backend& backend, runtime::op_code code) {
  for (runtime::io_op* op : backend.pending()) {
    if (op->code == code && !op->internal) return op;
  }
  return nullptr;
}
// The oldest pending operation the test may complete, or null.
inline runtime::io_op* oldest_op(runtime::test_backend& backend) {
  for (runtime::io_op* op : backend.pending()) {
    if (!op->internal) return op;
  }
  return nullptr;
}
inline std::size_t pending_count(runtime::test_backend& backend) {
  std::size_t n = 0;
  for (runtime::io_op* op : backend.pending()) n += op->internal ? 0 : 1;
  return n;
}

// Performs pending operations for real, one at a time, until none is left after a few turns.
inline runtime::task<void> run_io(runtime::test_backend* backend) {
  for (int idle = 0; idle < 4;) {
    co_await turns(2);
    runtime::io_op* next = oldest_op(*backend);
    if (next == nullptr) {
      ++idle;
      continue;
    }
    idle = 0;
    backend->perform(*next);
  }
}

// --- reading a state file back -----------------------------------------------------------------

struct read_record {
  snapshot::state_record_header header;
  std::vector<std::byte> payload;
};
struct read_state_file {
  snapshot::state_file_header header;
  std::vector<read_record> records;  // every record before `end`
  snapshot::state_end_payload end;
  std::size_t size_bytes = 0;
};

inline std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
  return bytes;
}

// Parses and validates a whole state file: header, every record header and payload CRC, sequence
// numbers, and the single `end` record at the very end. Throws naming the first fault.
inline read_state_file parse_state_file(const std::string& path) {
  const std::vector<std::byte> bytes = file_bytes(path);
  const std::span<const std::byte> all(bytes);
  read_state_file out;
  out.size_bytes = bytes.size();
  if (all.size() < snapshot::state_file_header_bytes) throw std::runtime_error(path + ": shorter than a header");
  out.header = snapshot::decode_file_header(all.first(snapshot::state_file_header_bytes), path).value();
  std::size_t at = snapshot::state_file_header_bytes;
  std::uint64_t payload_total = 0;
  for (std::uint32_t sequence = 0;; ++sequence) {
    if (all.size() - at < snapshot::state_record_header_bytes) throw std::runtime_error(path + ": cut in a record header");
    const auto header = snapshot::decode_record_header(all.subspan(at, snapshot::state_record_header_bytes), path).value();
    at += snapshot::state_record_header_bytes;
    if (header.sequence != sequence) throw std::runtime_error(path + ": record out of sequence");
    if (all.size() - at < header.payload_bytes) throw std::runtime_error(path + ": cut in a payload");
    const auto payload = all.subspan(at, header.payload_bytes);
    at += header.payload_bytes;
    if (buffers::crc32c(payload) != header.payload_crc) throw std::runtime_error(path + ": payload checksum mismatch");
    if (header.type == snapshot::record_type::end) {
      out.end = snapshot::decode_end_payload(payload, path).value();
      if (at != all.size()) throw std::runtime_error(path + ": bytes after the end record");
      if (out.end.records != sequence || out.end.payload_bytes != payload_total) {
        throw std::runtime_error(path + ": end record does not match the records before it");
      }
      return out;
    }
    payload_total += header.payload_bytes;
    out.records.push_back({header, std::vector<std::byte>(payload.begin(), payload.end())});
  }
}

}  // namespace sluice::test
