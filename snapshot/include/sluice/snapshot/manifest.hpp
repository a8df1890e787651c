#pragma once
// The manifest of one checkpoint: `chk-<id>/_manifest`, the file whose durable presence makes the
// checkpoint exist (docs/design.md invariant 7). A versioned text format, readable with `cat`:
//
//   sluice-manifest 1
//   checkpoint 7
//   mode unaligned
//   created_unix_ms 1712000000000
//   tasks 2
//   file task-0.state 4096 1a2b3c4d 120 3900        name size_bytes crc32c(hex) operator_state_bytes channel_state_bytes
//   file task-1.state 2048 99aa00ff 64 1900
//   requires 2 3 5                                   optional: n, then n checkpoint ids, ascending
//   metadata 1
//   meta job.name 77696e646f77                       key, then the value's bytes in hex
//   end 5e6f7a81                                     CRC32C (hex) of every byte before this line
//
// Every line ends with '\n'; lines come in exactly this order, metadata by ascending key; nothing
// follows the end line. Numbers are decimal, CRCs 8 lowercase hex digits. File names are plain names (no '/', not starting with
// '.' or '_'), so a damaged manifest cannot point outside its directory. Job metadata is an opaque,
// extensible key/value block for whatever a resumed job needs beyond operator state (source offsets
// live in operator state).
//
// The `requires` line lists the checkpoints this one's state files are deltas on (an operator's state
// here is a delta on its state there, state_file.hpp; each of those lists its own): each above 0 and
// below this checkpoint, strictly ascending, n above 0. It is there only when there is one, so a manifest
// without deltas is byte for byte what it was before the line existed, and older manifests decode.
//
// The job's fingerprint (what job, graph, parallelism and inputs the checkpoint was taken of) is the
// metadata entry `job.fingerprint` (its text form, dataflow/job_fingerprint.hpp, as hex). It is
// optional in the format, so manifests written before it existed still decode: they have no
// identity, which run_job refuses to resume (it cannot tell whether the checkpoint is this job's).

#include <sluice/io/result.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::snapshot {

inline constexpr std::uint32_t manifest_version = 1;
inline constexpr std::size_t max_manifest_bytes = 16u * 1024 * 1024;
inline constexpr std::size_t max_manifest_name_bytes = 255;
inline constexpr std::string_view manifest_file_name = "_manifest";
inline constexpr std::string_view manifest_temp_file_name = "_manifest.tmp";
// The metadata key of the job's fingerprint (see above).
inline constexpr std::string_view job_fingerprint_key = "job.fingerprint";

struct manifest_file {
  std::string name;  // "task-2.state"
  std::uint64_t size_bytes = 0;
  std::uint32_t crc32c = 0;  // of the whole file
  std::uint64_t operator_state_bytes = 0;
  std::uint64_t channel_state_bytes = 0;
  // The checkpoints this file's operator state is a delta on (state_file_summary::bases): ascending,
  // each once. Not on the file's line: what a commit unites into the manifest's requires_checkpoints.
  // A decoded manifest's entries have none.
  std::vector<checkpoint_id> bases;
  friend bool operator==(const manifest_file&, const manifest_file&) = default;
};

struct checkpoint_manifest {
  checkpoint_id checkpoint = no_checkpoint;
  checkpoint_mode mode = checkpoint_mode::aligned;
  std::uint64_t created_unix_ms = 0;
  std::vector<manifest_file> files;
  std::map<std::string, std::vector<std::byte>> metadata;
  // Every checkpoint this one's files are deltas on (the `requires` line): ascending, each once.
  // Last, so aggregate initializers written before it existed still mean what they did.
  std::vector<checkpoint_id> requires_checkpoints;
  friend bool operator==(const checkpoint_manifest&, const checkpoint_manifest&) = default;
};

// A plain file name: 1..255 bytes of [A-Za-z0-9._-], not starting with '.' or '_'.
bool is_valid_file_name(std::string_view name) noexcept;
// A metadata key: 1..255 bytes of [A-Za-z0-9._-].
bool is_valid_metadata_key(std::string_view key) noexcept;

// The manifest's text. File names and keys must be valid, requires_checkpoints strictly ascending
// and each in 1..checkpoint-1 (asserted); the caller checks first.
std::string encode_manifest(const checkpoint_manifest& manifest);

// Parses and checks a manifest; errors (code storage_errc::bad_manifest) start with `label`:
// "chk-7/_manifest: bad checksum (the end line says 1a2b3c4d, the content has 5e6f7a81)".
io::result<checkpoint_manifest> decode_manifest(std::string_view text, std::string_view label);

}  // namespace sluice::snapshot
