#pragma once
// Reading one task's state file (format: state_file.hpp) end to end, checking everything:
// the file header (and which checkpoint and task it names), every record header, sequence numbers
// 0, 1, 2, ..., each payload's CRC32C, exactly one `end` record last whose counts match the records
// before it, and nothing after it. A file cut anywhere, or with any byte flipped, is rejected.
// An operator_base record must name a checkpoint above 0 and below the file's, once per operator.
//
// - state_file_parser is the check itself, fed bytes in file order (any chunking); it does no I/O,
//   so it is what a fuzzer or a test drives.
// - validate_state_file streams a file through it (memory bounded by one read buffer) and keeps
//   only totals; read_state_file also keeps the payloads, for recovery.
//
// Errors are io::errors coded with storage_errc (truncated, bad_checksum, bad_format), or an errno
// from the I/O, whose message starts with the file's label:
//   "chk-7/task-2.state: truncated: record 5 payload needs 32768 bytes, 100 remain"
//   "chk-7/task-2.state: bad checksum in record 3"
//   "chk-7/task-2.state: missing end record (the file ends after record 4)"

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/state_file.hpp>
#include <sluice/snapshot/storage_error.hpp>

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sluice::snapshot {

// An input channel (gate, channel) or an output subpartition (partition, subpartition).
struct channel_key {
  std::uint16_t group = 0;
  std::uint32_t index = 0;
  friend auto operator<=>(const channel_key&, const channel_key&) = default;
};

// What a whole valid state file amounts to.
struct state_file_summary {
  checkpoint_id checkpoint = no_checkpoint;
  task_id task = 0;
  std::uint64_t size_bytes = 0;            // the whole file
  std::uint32_t crc32c = 0;                // of the whole file (what the manifest records)
  std::uint64_t records = 0;               // before the end record
  std::uint64_t operator_state_bytes = 0;  // payload bytes of operator_state records
  std::uint64_t channel_state_bytes = 0;   // payload bytes of input_channel and output_channel records
  // The checkpoints this file's operator state is a delta on (its operator_base records), ascending,
  // each once. Empty for a file that holds every operator's whole state.
  std::vector<checkpoint_id> bases;
  // The same by operator: operator index -> the checkpoint its state here is a delta on (what
  // checkpoint_storage::load() follows, one chain per operator). Empty for a whole file.
  std::map<std::uint32_t, checkpoint_id> operator_bases;
};

// One task's state, as recovery needs it. Records of one key concatenate in file order; a key with
// only empty records is present with no bytes.
struct task_state {
  state_file_summary summary;
  std::map<std::uint32_t, std::vector<std::byte>> operator_state;  // by operator index
  std::map<channel_key, std::vector<std::byte>> input_channels;    // by (gate, channel)
  std::map<channel_key, std::vector<std::byte>> output_channels;   // by (partition, subpartition)
  // Operators whose operator_state here is a delta: operator index -> the checkpoint it is based on.
  std::map<std::uint32_t, checkpoint_id> operator_bases;
  // For each operator in operator_bases, the operator_state of the earlier links of its chain, oldest
  // (the whole state) first, then each delta up to the base itself; this file's own delta is in
  // operator_state. Filled by checkpoint_storage::load(); read_state_file leaves it empty.
  std::map<std::uint32_t, std::vector<std::vector<std::byte>>> operator_chain;
};

// What the file must claim to be; unset fields are not checked.
struct state_file_expectation {
  std::optional<checkpoint_id> checkpoint;
  std::optional<task_id> task;
};

class state_file_parser {
 public:
  // `label` starts every error message ("chk-7/task-2.state"). With `keep` set, payloads are
  // appended to *keep (its summary is filled by finish()); otherwise only totals are kept.
  state_file_parser(std::string label, state_file_expectation expect, task_state* keep = nullptr);

  // Feeds the next bytes of the file. Returns false once the file is known to be bad (then
  // finish() names the fault); further bytes are ignored.
  bool feed(std::span<const std::byte> bytes);
  // The verdict, once every byte was fed.
  io::result<state_file_summary> finish();

 private:
  enum class stage : std::uint8_t { file_header, record_header, payload, after_end, failed };

  std::size_t take_header(std::span<const std::byte>& bytes, std::size_t need);
  void on_file_header();
  void on_record_header();
  void on_payload_done();
  void on_operator_base();
  void fail(storage_errc code, std::string fault);
  void fail(io::error e);

  std::string label_;
  state_file_expectation expect_;
  task_state* keep_;
  stage stage_ = stage::file_header;
  std::array<std::byte, state_file_header_bytes> header_{};  // a header being assembled
  std::size_t header_got_ = 0;
  state_record_header record_{};
  std::vector<std::byte>* payload_target_ = nullptr;  // keep mode: where this payload goes
  std::uint32_t payload_got_ = 0;
  std::uint32_t payload_crc_ = 0;
  std::array<std::byte, state_end_payload_bytes> end_payload_{};
  std::array<std::byte, state_operator_base_payload_bytes> base_payload_{};
  std::map<std::uint32_t, checkpoint_id> bases_;  // the operator_base records so far, by operator
  std::uint64_t bytes_after_end_ = 0;
  std::uint64_t payload_bytes_before_end_ = 0;
  state_file_summary summary_;
  std::optional<io::error> error_;
};

// Checks the file in memory.
io::result<state_file_summary> validate_state_bytes(std::span<const std::byte> bytes, std::string label,
                                                    state_file_expectation expect = {});

// Streams the file at `path` through the parser with io_uring reads (errors from the I/O name the
// path; the parser's name `label`).
runtime::task<io::result<state_file_summary>> validate_state_file(std::string path, std::string label,
                                                                  state_file_expectation expect = {});
// The same, keeping every payload in memory.
runtime::task<io::result<task_state>> read_state_file(std::string path, std::string label,
                                                      state_file_expectation expect = {});

}  // namespace sluice::snapshot
