#pragma once
// Checkpoint storage: where completed checkpoints live on disk, how one is committed, which are
// kept, and which one recovery takes.
//
// Layout: <root>/chk-<id>/ holds one state file per task (`task-<t>.state`, state_file.hpp),
// `_manifest` (manifest.hpp), which lists every file with its size and CRC32C, and the empty marker
// `.sluice-checkpoint`, made right after the directory: sluice made this directory.
//
// Commit protocol (docs/design.md invariant 7): a checkpoint exists only once its manifest is durable,
// and the commit reports success only once everything recovery needs is durable: each state file's
// bytes and directory entry, the manifest's bytes and directory entry, and chk-<id> in the root.
//   1. create_checkpoint_dir(id): mkdir <root>/chk-<id> and create its marker in it (io_uring ops),
//      at the trigger.
//   2. prepare_checkpoint(id, tasks), off the critical path, concurrently with the tasks' snapshots:
//      create every task's `task-<t>.state` and `_manifest` empty with O_CREAT and WITHOUT O_TRUNC
//      (so it never truncates what a task's writer already wrote; the writer opens with O_TRUNC,
//      which empties only the empty file), then fsync chk-<id>/ and <root>/ (concurrently). From
//      then on those names are durable; what is in the files is not yet.
//   3. The channel-state writer writes and fsyncs every task's state file (its bytes).
//   4. commit_manifest(m): when prepare_checkpoint succeeded for every name `m` lists, write the
//      manifest bytes in place into the existing, still empty `_manifest` and fdatasync it: the
//      commit point. No temp file and rename: the manifest is sealed by a CRC32C, so a torn or
//      partial one fails validation and is skipped with its reason. Otherwise (not prepared, e.g.
//      a caller that skipped step 2) the full protocol: create `_manifest`, write, fsync, close,
//      fsync chk-<id>/, fsync <root>/. On any failure `_manifest` is removed (best effort) and the
//      error names the step and the file.
//      commit_verified() first builds each file's entry by reading it back and validating it end to
//      end (describe_state_file), so a commit never vouches for bytes it has not checked.
//   Critical path with step 2: the state file's fsync, then the manifest's fdatasync.
//   An EMPTY `_manifest` (step 2 ran, step 4 never did) means "never committed", exactly like a
//   missing one (storage_errc::missing_manifest), for recovery, retention and reports alike; a
//   non-empty one that does not validate is bad_manifest with its reason.
//
// Recovery reads back: validate(id) checks the manifest (checksum, syntax, id) and every listed file
// end to end (state file parse, size, CRC32C, byte totals). newest_valid() returns the newest valid
// checkpoint and logs why each newer one was skipped. load(id) returns the task states themselves.
//
// Incremental checkpoints: a state file may hold an operator's state as a delta on the same task's
// file in an earlier checkpoint (its operator_base records, state_file.hpp), which may be a delta
// too. The commit writes the union of its files' bases into the manifest (`requires`), and a
// checkpoint is valid only if every file's bases are among its requires and every checkpoint it
// requires is valid, recursively ("chk-9: requires chk-7, which is not valid: <why>", with chk-7's
// fault code). load(id) follows each delta operator's chain through the same task's files, oldest
// first (task_state::operator_chain). Retention keeps what a kept checkpoint requires.
//
// Ids on disk: a directory counts as checkpoint <id> only when named `chk-<id>` with <id> decimal,
// without a leading zero, from 1 to max_checkpoint_id (2^62). Any other `chk-*` entry (chk-007,
// chk-7.tmp, chk-18446744073709551615) is invalid with its reason (storage_errc::bad_name): list()
// reports it, newest_valid() logs it, and neither recovery's next id nor retention ever uses it.
// The bound keeps `highest + 1` far from wrapping: the id after chk-<2^62> is refused instead.
//
// Retention keeps the newest K committed checkpoints (a manifest that decodes; an empty one does
// not) and every committed checkpoint they require, transitively; removes older ones
// and every uncommitted directory older than the newest committed one, and never touches the
// in-progress id. A removal unlinks `_manifest` first (so a half-removed checkpoint is never taken
// for a committed one), then the other files, then rmdirs.
// It removes only what sluice made: a chk-<id> DIRECTORY (a symlink or a file named so is never
// followed, read or removed, by retention, recovery or list(): storage_errc::not_a_directory) that is
// committed or carries the marker. An uncommitted one without the marker (a user's directory named
// chk-1000, or one made before markers existed) is left alone with a warning (storage_errc::
// not_owned), unless it is empty (rmdir). Removal holds the directory open with O_NOFOLLOW and
// unlinks each file relative to that descriptor (io::directory), never recursing.
//
// Nothing blocks the executor, even on a shared filesystem (NFS): every file operation is an
// io_uring op (a file's size is a statx op), and directory LISTINGS, for which io_uring has no op,
// run on the executor's blocking-work pool (io::list_directory, runtime/offload.hpp): list(),
// newest_valid() and retain() list <root> once, and retain() lists a removed directory only when
// its files are not all known from its manifest.
//
// One object per root, used from one executor; it must outlive the tasks its methods return.

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>
#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/manifest.hpp>
#include <sluice/snapshot/state_file_reader.hpp>
#include <sluice/snapshot/storage_error.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

namespace sluice::snapshot {

// The largest id a checkpoint directory may carry. Recovery continues at the highest id on disk + 1,
// so it refuses to start above this one rather than wrap (2^62 checkpoints, one per millisecond,
// take 146 million years).
inline constexpr checkpoint_id max_checkpoint_id = checkpoint_id{1} << 62;

// The empty file create_checkpoint_dir puts in every chk-<id>/ it makes (see the top of this file).
inline constexpr std::string_view checkpoint_marker_file_name = ".sluice-checkpoint";

struct storage_options {
  std::size_t retained_checkpoints = 3;  // K: committed checkpoints retention keeps (>= 1)
};

// One `chk-<id>` directory as list() and validate() see it.
struct checkpoint_info {
  checkpoint_id id = no_checkpoint;  // no_checkpoint for an entry whose name is not a valid id
  std::string name;                  // the entry's name: "chk-7" (or "chk-007", for bad_name)
  std::string path;                  // <root>/<name>
  bool valid = false;
  std::error_code fault;  // when invalid: a storage_errc, or an errno from the I/O
  std::string reason;     // when invalid: "chk-7/task-2.state: bad checksum in record 3 (...)"
  // From the manifest, when it decodes (even if a file then fails):
  bool has_manifest = false;
  checkpoint_mode mode = checkpoint_mode::aligned;
  std::uint64_t created_unix_ms = 0;
  std::size_t tasks = 0;
  // This checkpoint's own state files, as its manifest lists them; the checkpoints it requires are
  // not counted (their bytes are theirs: a delta's checkpoint shows what it wrote). size_bytes is
  // kept for the listings that read it and equals written_bytes.
  std::uint64_t size_bytes = 0;
  std::uint64_t written_bytes = 0;
  // The full state: the bytes a recovery from this checkpoint reads to restore it, which load()
  // reads whole: this checkpoint's own state files and, for each operator whose state is a delta,
  // the same task's file in every checkpoint down its chain (each file once, channel-state records
  // included: load() reads a base file whole and keeps its operator records). Validation reads
  // every file of every required checkpoint besides; that is not counted. Equal to written_bytes
  // for a checkpoint that requires none. Known only for a valid checkpoint (recovery never reads an
  // invalid one, and a missing or invalid base leaves its chain unknown).
  std::optional<std::uint64_t> state_bytes;
  std::uint64_t operator_state_bytes = 0;
  std::uint64_t channel_state_bytes = 0;
  // The checkpoints this one's state is a delta on (its manifest's `requires` line), ascending: it is
  // valid only if each of them is, and retention keeps them while it keeps this one.
  std::vector<checkpoint_id> requires_checkpoints;
};

// What newest_valid() found: the checkpoint to recover from, if any, and the newer ones skipped.
struct recovery_choice {
  std::optional<checkpoint_info> chosen;
  std::vector<checkpoint_info> skipped;  // newest first, each with its reason
  std::vector<checkpoint_info> ignored;  // bad_name (id 0), and not_a_directory (a symlink chk-<id>)
};

struct loaded_checkpoint {
  checkpoint_manifest manifest;
  // In manifest order. An operator whose state is a delta (task_state::operator_bases) has its
  // chain's earlier states in task_state::operator_chain, oldest first.
  std::vector<task_state> tasks;
};

struct retention_report {
  std::vector<checkpoint_id> kept;     // committed, newest first: the newest K and what they require
  std::vector<checkpoint_id> removed;  // ascending
  std::vector<std::string> failures;   // removals that failed (left for the next pass)
  std::vector<checkpoint_id> left_alone;  // not sluice's (storage_errc::not_owned): never removed
  std::vector<checkpoint_id> unreadable;  // its manifest could not be read (an I/O error): not decided
};

class checkpoint_storage {
 public:
  explicit checkpoint_storage(std::string root, storage_options options = {});
  checkpoint_storage(const checkpoint_storage&) = delete;
  checkpoint_storage& operator=(const checkpoint_storage&) = delete;

  const std::string& root() const noexcept { return root_; }
  std::string checkpoint_dir(checkpoint_id id) const;                // <root>/chk-<id>
  std::string state_file_path(checkpoint_id id, task_id task) const;  // <root>/chk-<id>/task-<t>.state
  // <id> when `text` is exactly "chk-<id>" (decimal, no leading zero, 1..max_checkpoint_id), else nothing.
  static std::optional<checkpoint_id> parse_dir_name(std::string_view text) noexcept;
  // For a name starting with "chk-" that parse_dir_name() rejects, why: "checkpoint id
  // 18446744073709551615 is above the largest valid id 4611686018427387904 (2^62)". Nothing for a
  // valid name or one without the prefix (not a checkpoint's name at all).
  static std::optional<std::string> bad_dir_name_reason(std::string_view text);

  // mkdir <root>/chk-<id>, making <root> first if it is missing, then its marker
  // (checkpoint_marker_file_name) in it. Fails if the directory exists: never marks another's.
  runtime::task<io::result<void>> create_checkpoint_dir(checkpoint_id id);

  // Step 2 of the commit protocol (see the top of this file): makes the names `_manifest` and
  // task-<t>.state for each of `tasks` exist in chk-<id>/ (created empty if missing, never
  // truncated) and durable, with the chk-<id> entry in the root. On success a later
  // commit_manifest of `id` that lists only these files takes the fast path. Errors are prefixed
  // "prepare checkpoint <id>: ".
  runtime::task<io::result<void>> prepare_checkpoint(checkpoint_id id, std::vector<task_id> tasks);
  // Removes chk-<id>/ and what prepare_checkpoint(id, tasks) made in it: a directory prepared for a
  // checkpoint that never ran (the coordinator prepares periodic checkpoints ahead). The names are
  // known, so the directory is listed only if something else is in it. A missing one is fine; one
  // without the marker is not removed (not_owned), as in retention.
  runtime::task<io::result<void>> discard_unused(checkpoint_id id, std::vector<task_id> tasks);

  // Reads chk-<id>/task-<t>.state back, validates it end to end, and returns its manifest entry.
  runtime::task<io::result<manifest_file>> describe_state_file(checkpoint_id id, task_id task);

  // The commit protocol (see the top of this file) for a manifest whose entries the caller vouches
  // for: the fast path after a successful prepare_checkpoint, else the full one. Either way it
  // succeeds only once every name and byte recovery needs is durable. created_unix_ms == 0 is
  // replaced with the current time. requires_checkpoints becomes the union of what the caller gave
  // and every file's bases (so a caller may leave it empty); each must be in 1..id-1.
  runtime::task<io::result<void>> commit_manifest(checkpoint_manifest manifest);
  // Takes back the manifest of a checkpoint that aborted after commit_manifest succeeded (a task's
  // state file never became durable): unlinks `_manifest` and fsyncs chk-<id>/. A missing one is
  // fine. Errors are prefixed "withdraw checkpoint <id>: ".
  runtime::task<io::result<void>> withdraw_manifest(checkpoint_id id);
  // Describes every task's file (read back and validated), then commits. Returns the manifest, its
  // requires_checkpoints the union of its files' bases.
  runtime::task<io::result<checkpoint_manifest>> commit_verified(checkpoint_id id, checkpoint_mode mode,
                                                                 std::vector<task_id> tasks,
                                                                 std::map<std::string, std::vector<std::byte>> metadata);

  // One retention pass (see the top of this file). `in_progress` (or no_checkpoint) is never removed.
  // at_start: before any writer runs (a job's start-up), uncommitted directories newer than the
  // newest committed one go too, but the newest directory of all.
  runtime::task<io::result<retention_report>> retain(checkpoint_id in_progress, bool at_start = false);

  // Every `chk-*` entry whose name is not a valid id (invalid, bad_name, id no_checkpoint), by name,
  // then every chk-<id> entry, ascending by id: each directory validated end to end, and an entry that
  // is not a directory (a symlink: not followed) invalid with not_a_directory. Fails only if <root>
  // cannot be listed.
  runtime::task<io::result<std::vector<checkpoint_info>>> list();
  // The newest checkpoint that validates end to end; logs (warn) each newer one skipped and why.
  // Checkpoints in `rejected` (found unrestorable by the caller) are skipped with the reason given.
  // Checkpoints newer than `newest_allowed` are skipped unread (a job spread over workers commits a
  // pointer after the manifest: a manifest beyond it was never completed).
  runtime::task<io::result<recovery_choice>> newest_valid(std::map<checkpoint_id, std::string> rejected = {},
                                                          checkpoint_id newest_allowed = max_checkpoint_id);
  // One checkpoint, validated end to end.
  runtime::task<checkpoint_info> validate(checkpoint_id id);
  // Validates checkpoint `id` (and every checkpoint it requires) and returns every task's state, with
  // each delta operator's chain; the error is the first fault found.
  runtime::task<io::result<loaded_checkpoint>> load(checkpoint_id id);

 private:
  runtime::task<io::result<checkpoint_manifest>> read_manifest(checkpoint_id id);
  // One state file of a checked checkpoint: its size and its operators' bases (what a chain follows),
  // and for load(), in a checkpoint it requires, the file's operator records (a chain's link, read
  // in the same pass that validated it).
  struct checked_file {
    std::uint64_t size_bytes = 0;
    std::map<std::uint32_t, checkpoint_id> operator_bases;
    std::unique_ptr<task_state> kept;  // operator_state and operator_bases only; null unless load() keeps it
  };
  using checked_files = std::map<std::string, checked_file>;  // by file name
  // What one call (list(), load(), ...) found of each checkpoint it checked: why it is invalid, or
  // the files its manifest lists (a delta's base must be the same task's file).
  struct checked_checkpoint {
    std::optional<io::error> invalid;
    checked_files files;
  };
  struct validity_memo {
    std::map<checkpoint_id, checked_checkpoint> checked;
    // load(): the names of the loaded checkpoint's files that hold a delta. A checkpoint it requires
    // keeps the operator records of its files of these names (checked_file::kept): a chain stays in
    // its task's file.
    std::set<std::string> keep_names;
  };
  // Validates checkpoint `id` end to end, and each checkpoint it requires (through `memo`); fills
  // *info from the manifest (and, when valid, its state_bytes), *keep with the states and *files with
  // what it found of each file (with the records memo->keep_names asks for).
  runtime::task<io::result<checkpoint_manifest>> check(checkpoint_id id, std::vector<task_state>* keep,
                                                       checkpoint_info* info, validity_memo* memo,
                                                       checked_files* files = nullptr);
  // Required checkpoint `id`, checked once per memo (the entry stays put: map nodes do not move).
  runtime::task<const checked_checkpoint*> check_required(checkpoint_id id, validity_memo* memo);
  // Records the verdict of check() on `id` in *memo, with the files it found when valid.
  static const checked_checkpoint* remember(checkpoint_id id, const io::result<checkpoint_manifest>& checked,
                                            checked_files files, validity_memo* memo);
  // The bytes load() reads to restore a valid checkpoint whose files are `own` (checked against
  // `memo`, which holds every checkpoint it requires): `own`, then each base file its operators'
  // chains go through, whole and once (checkpoint_info::state_bytes).
  static std::uint64_t restore_read_bytes(const checked_files& own, const validity_memo& memo);
  runtime::task<checkpoint_info> validate_with(checkpoint_id id, validity_memo* memo);
  // Fills state->operator_chain for every delta operator of `state` (a file of checkpoint `id`),
  // taking each link's bytes from what check() kept in `memo` (no file is read again).
  io::result<void> load_chains(checkpoint_id id, task_state* state, validity_memo* memo) const;
  // The state check() kept of file `name` of required checkpoint `id`; `why` ("operator 2 of
  // chk-9/task-0.state is based on it") ends its errors.
  io::result<task_state*> chain_link(checkpoint_id id, const std::string& name, const std::string& why,
                                     validity_memo* memo) const;
  // Removes chk-<id>/ if it is sluice's: committed (`manifest`, what it lists is `known` too) or
  // marked; else not_owned (an empty one is rmdir'ed). `known`: names to unlink before a listing.
  runtime::task<io::result<void>> remove_checkpoint_dir(checkpoint_id id, std::optional<checkpoint_manifest> manifest,
                                                        std::vector<std::string> known);
  struct listing {
    std::vector<checkpoint_id> ids;       // directories, ascending
    std::vector<checkpoint_info> ignored;  // bad names, by name
  };
  runtime::task<io::result<listing>> scan() const;                         // readdir, offloaded
  runtime::task<io::result<std::vector<checkpoint_id>>> list_ids() const;  // scan().ids
  // Whether prepare_checkpoint made `_manifest` and every file `manifest` lists durable.
  bool names_durable(const checkpoint_manifest& manifest) const;
  void forget_prepared(checkpoint_id up_to);  // drops what prepare_checkpoint recorded for ids <= up_to
  std::string label(checkpoint_id id, std::string_view name) const;  // "chk-<id>/<name>"

  std::string root_;
  storage_options options_;
  // Per prepared checkpoint: the names prepare_checkpoint made durable in chk-<id>/ (and chk-<id>
  // itself in the root). Entries end at the commit of that id or a newer one, or at its removal.
  std::map<checkpoint_id, std::set<std::string>> durable_names_;
  std::set<checkpoint_id> not_ours_;  // not_owned directories a retention pass found (and warned about)
};

}  // namespace sluice::snapshot
