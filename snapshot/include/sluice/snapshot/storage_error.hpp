#pragma once
// Why a checkpoint on disk is not usable: the error codes of checkpoint storage and of the state
// file reader. Each failure is an io::error whose code is one of these (or an errno from the I/O
// itself) and whose message names the file and the fault:
//   "chk-7/task-2.state: truncated: record 5 payload needs 32768 bytes, 100 remain".
// `sluice checkpoints --json` and recovery's log lines report the code's name (to_string).

#include <string_view>
#include <system_error>
#include <type_traits>

namespace sluice::snapshot {

enum class storage_errc {
  missing_manifest = 1,  // no `_manifest`: the checkpoint never committed (aborted or in progress)
  bad_manifest,          // `_manifest` unreadable as a manifest: syntax, version, checksum, ids
  missing_file,          // a state file the manifest lists does not exist
  size_mismatch,         // a state file's size differs from the manifest's
  bad_checksum,          // a CRC32C differs: a record's payload, or the whole file vs. the manifest
  truncated,             // a state file ends inside a header or payload, or before its end record
  bad_format,            // anything else malformed in a state file (magic, header, order, counts)
  unrestorable,          // every file validates, but the state does not restore (the job said why)
  bad_name,              // a `chk-*` entry whose name is not a valid id (chk-007, chk-18446744073709551615)
  not_a_directory,       // a `chk-<id>` entry that is a symbolic link or a file: never followed or removed
  not_owned,             // a `chk-<id>` directory retention leaves alone: no marker, no committed manifest
};

const std::error_category& storage_category() noexcept;
inline std::error_code make_error_code(storage_errc e) noexcept { return {static_cast<int>(e), storage_category()}; }

// "missing-manifest", "bad-manifest", ...; "io-error" for a code outside storage_category().
std::string_view fault_name(const std::error_code& code) noexcept;

}  // namespace sluice::snapshot

template <>
struct std::is_error_code_enum<sluice::snapshot::storage_errc> : std::true_type {};
