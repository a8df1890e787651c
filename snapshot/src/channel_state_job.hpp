#pragma once
// Private to the channel-state writer: one checkpoint's write state, shared by the bookkeeping
// (channel_state_writer.cpp) and the pump (channel_state_writer_io.cpp).

#include <sluice/buffers/buffer.hpp>
#include <sluice/io/file.hpp>
#include <sluice/snapshot/channel_state_writer.hpp>
#include <sluice/snapshot/state_file.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace sluice::snapshot {

// One record to write: its header (encoded at enqueue) and its payload, which is either a view of
// a captured buffer (channel state) or bytes the writer owns (operator state).
struct channel_state_writer::pending_write {
  std::array<std::byte, state_record_header_bytes> header{};
  std::uint64_t offset_bytes = 0;
  buffers::buffer_view view;
  std::vector<std::byte> bytes;

  std::span<const std::byte> payload() const noexcept {
    return view.valid() ? view.data() : std::span<const std::byte>(bytes);
  }
};

struct channel_state_writer::checkpoint_job {
  checkpoint_id id = no_checkpoint;
  std::string path;                 // <target dir>/task-<task>.state
  bool channel_state = true;        // false: start_aligned (operator state only)
  bool input_finished = false;
  bool output_finished = false;
  bool opened = false;              // the pump has begun its I/O (open in flight, or file open)
  bool header_written = false;      // the file header is out (it goes with the first write)
  bool aborted = false;             // ended as aborted; the pump only closes its file
  io::file file;
  std::deque<pending_write> queue;  // bounded by the buffers the pools can lend, plus operator states
  std::uint64_t next_offset_bytes = state_file_header_bytes;
  std::uint32_t next_sequence = 0;
  std::uint64_t channel_state_bytes = 0;
  std::uint64_t operator_state_bytes = 0;
  std::uint64_t base_payload_bytes = 0;         // operator_base records' (counted in the end record only)
  std::set<std::uint32_t> based_operators;      // operators given a base (at most one each)
  std::chrono::nanoseconds fsync_duration{0};  // the state file's fsync (finalize)

  bool finished() const noexcept { return input_finished && output_finished; }
};

}  // namespace sluice::snapshot
