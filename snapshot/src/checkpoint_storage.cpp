// Checkpoint storage (see checkpoint_storage.hpp): the commit protocol and validation (check()).
// Listing, validate() and recovery's choice live in checkpoint_listing.cpp, retention in
// retention.cpp, load() in checkpoint_loading.cpp.

#include <sluice/io/file.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/system.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <set>
#include <chrono>
#include <memory>
#include <span>
#include <utility>

namespace sluice::snapshot {

namespace {

io::error with_code(storage_errc code, std::string message) { return io::error(make_error_code(code), std::move(message)); }

io::error prefixed(std::string_view prefix, const io::error& e) {
  return io::error(e.code(), fmt::format("{}: {}", prefix, e.message()));
}

bool is_enoent(const io::error& e) noexcept { return e.code() == std::errc::no_such_file_or_directory; }

std::optional<std::uint64_t> parse_id(std::string_view digits) noexcept {
  std::uint64_t v = 0;
  if (digits.empty() || digits[0] == '0') return std::nullopt;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

// The task a file named "task-<t>.state" holds; nothing for another name.
std::optional<task_id> task_of_file_name(std::string_view name) noexcept {
  constexpr std::string_view prefix = "task-";
  constexpr std::string_view suffix = ".state";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) return {};
  const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits == "0") return task_id{0};
  const auto v = parse_id(digits);
  if (!v || *v > 0xFFFF'FFFFu) return {};
  return static_cast<task_id>(*v);
}

// Validates one state file, keeping its payloads in *keep when given. A missing file is
// storage_errc::missing_file.
runtime::task<io::result<state_file_summary>> check_file(std::string path, std::string label,
                                                         state_file_expectation expect, std::vector<task_state>* keep) {
  std::optional<io::error> failed;
  state_file_summary summary;
  if (keep != nullptr) {
    auto state = co_await read_state_file(path, label, expect);
    if (state) {
      summary = state->summary;
      keep->push_back(std::move(state).value());
    } else {
      failed = std::move(state).error();
    }
  } else {
    auto checked = co_await validate_state_file(path, label, expect);
    if (checked) summary = *checked; else failed = std::move(checked).error();
  }
  if (failed && is_enoent(*failed)) {
    co_return with_code(storage_errc::missing_file,
                        fmt::format("{}: missing state file: open '{}': {}", label, path, failed->code().message()));
  }
  if (failed) co_return std::move(*failed);
  co_return summary;
}

// The checks of a validated state file against its manifest entry: size, CRC32C and byte totals.
io::result<void> matches_manifest(const manifest_file& f, const state_file_summary& summary,
                                  const std::string& file_label) {
  if (summary.size_bytes != f.size_bytes) {
    return with_code(storage_errc::size_mismatch, fmt::format("{}: size mismatch: the manifest says {} bytes, the file "
                                                              "has {}",
                                                              file_label, f.size_bytes, summary.size_bytes));
  }
  if (summary.crc32c != f.crc32c) {
    return with_code(storage_errc::bad_checksum,
                     fmt::format("{}: bad checksum: the manifest says CRC32C {:08x}, the file has {:08x}", file_label,
                                 f.crc32c, summary.crc32c));
  }
  if (summary.operator_state_bytes != f.operator_state_bytes || summary.channel_state_bytes != f.channel_state_bytes) {
    return with_code(storage_errc::bad_manifest,
                     fmt::format("{}: the manifest says {} operator state and {} channel state bytes, the file "
                                 "holds {} and {}",
                                 file_label, f.operator_state_bytes, f.channel_state_bytes,
                                 summary.operator_state_bytes, summary.channel_state_bytes));
  }
  return io::success();
}

// A base file's state as a chain needs it (its operator records; channel state dropped), or null
// when check_file kept none.
std::unique_ptr<task_state> chain_link_of(std::vector<task_state>& kept) {
  if (kept.empty()) return nullptr;
  auto link = std::make_unique<task_state>(std::move(kept.front()));
  link->input_channels.clear();
  link->output_channels.clear();
  return link;
}

// Closes `f` after a failed step; the step's error is the one to report.
runtime::task<void> close_quietly(io::file* f) {
  auto closed = co_await f->close();
  (void)closed;
}

// Writes `text` into `f` (open for writing, empty) at offset 0, makes its bytes durable (fdatasync
// with `data_only`, else fsync) and closes it.
runtime::task<io::result<void>> write_durably(io::file f, std::string text, bool data_only) {
  auto written = co_await f.write_all(std::as_bytes(std::span<const char>(text.data(), text.size())), 0);
  if (!written) {
    co_await close_quietly(&f);
    co_return written;
  }
  io::result<void> synced = io::success();
  if (data_only) {
    synced = co_await f.fdatasync();
  } else {
    synced = co_await f.fsync();
  }
  if (!synced) {
    co_await close_quietly(&f);
    co_return synced;
  }
  co_return co_await f.close();
}

// Creates `path` empty if it does not exist, never truncating it (O_CREAT without O_TRUNC), and
// closes it: the name exists afterwards, whatever a concurrent writer has put in the file.
runtime::task<io::result<void>> ensure_exists(std::string path) {
  auto opened = co_await io::file::open(std::move(path), io::open_options{.read = false, .write = true, .create = true});
  if (!opened) co_return std::move(opened).error();
  io::file f = std::move(opened).value();
  co_return co_await f.close();
}

// The manifest's requires_checkpoints: what the caller gave, united with every file's bases.
void unite_requires(checkpoint_manifest& manifest) {
  auto& ids = manifest.requires_checkpoints;
  for (const auto& f : manifest.files) ids.insert(ids.end(), f.bases.begin(), f.bases.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

std::uint64_t now_unix_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        runtime::sys().wall_now().time_since_epoch())
                                        .count());
}

}  // namespace

checkpoint_storage::checkpoint_storage(std::string root, storage_options options)
    : root_(std::move(root)), options_(options) {
  assert(!root_.empty());
  assert(options_.retained_checkpoints >= 1);
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string checkpoint_storage::checkpoint_dir(checkpoint_id id) const { return fmt::format("{}/chk-{}", root_, id); }

std::string checkpoint_storage::state_file_path(checkpoint_id id, task_id task) const {
  return fmt::format("{}/{}", checkpoint_dir(id), state_file_name(task));
}

std::string checkpoint_storage::label(checkpoint_id id, std::string_view name) const {
  return fmt::format("chk-{}/{}", id, name);
}

runtime::task<io::result<void>> checkpoint_storage::create_checkpoint_dir(checkpoint_id id) {
  assert(id != no_checkpoint);
  if (id > max_checkpoint_id) {
    // Never a name that recovery would then ignore (see the top of checkpoint_storage.hpp).
    co_return io::error(std::make_error_code(std::errc::value_too_large),
                        fmt::format("mkdir '{}': checkpoint id {} is above the largest valid id {}", checkpoint_dir(id),
                                    id, max_checkpoint_id));
  }
  auto made = co_await io::make_directory(checkpoint_dir(id));
  if (!made && is_enoent(made.error())) {
    auto root_made = co_await io::make_directory(root_);  // the first checkpoint under a new root
    if (!root_made && root_made.error().code() != std::errc::file_exists) co_return root_made;
    made = co_await io::make_directory(checkpoint_dir(id));
  }
  if (!made) co_return made;
  // The marker, before anything else is put in it: retention removes no uncommitted chk-<id>
  // without it. It becomes durable with the directory's other names (prepare_checkpoint, or the
  // commit's full path), and a crash keeps no name of chk-<id>/ made after it without keeping it.
  co_return co_await ensure_exists(fmt::format("{}/{}", checkpoint_dir(id), checkpoint_marker_file_name));
}

runtime::task<io::result<manifest_file>> checkpoint_storage::describe_state_file(checkpoint_id id, task_id task) {
  const std::string name = state_file_name(task);
  auto summary = co_await check_file(state_file_path(id, task), label(id, name), {.checkpoint = id, .task = task}, nullptr);
  if (!summary) co_return std::move(summary).error();
  co_return manifest_file{name,
                          summary->size_bytes,
                          summary->crc32c,
                          summary->operator_state_bytes,
                          summary->channel_state_bytes,
                          std::move(summary->bases)};
}

runtime::task<io::result<void>> checkpoint_storage::prepare_checkpoint(checkpoint_id id, std::vector<task_id> tasks) {
  assert(id != no_checkpoint);
  const std::string what = fmt::format("prepare checkpoint {}", id);
  const std::string dir = checkpoint_dir(id);
  std::set<std::string> names{std::string(manifest_file_name)};
  for (const task_id task : tasks) names.insert(state_file_name(task));
  // 1. Every name, empty unless its writer got there first (never truncated: O_CREAT, no O_TRUNC).
  for (const auto& name : names) {
    auto made = co_await ensure_exists(fmt::format("{}/{}", dir, name));
    if (!made) co_return prefixed(what, made.error());
  }
  // 2. Those entries, and the chk-<id> entry in the root, durable. Independent: both at once.
  auto [dir_synced, root_synced] = co_await runtime::when_all(io::fsync_directory(dir), io::fsync_directory(root_));
  if (!dir_synced) co_return prefixed(what, dir_synced.error());
  if (!root_synced) co_return prefixed(what, root_synced.error());
  durable_names_[id] = std::move(names);
  co_return io::success();
}

bool checkpoint_storage::names_durable(const checkpoint_manifest& manifest) const {
  auto it = durable_names_.find(manifest.checkpoint);
  if (it == durable_names_.end() || !it->second.contains(std::string(manifest_file_name))) return false;
  return std::all_of(manifest.files.begin(), manifest.files.end(),
                     [&](const manifest_file& f) { return it->second.contains(f.name); });
}

void checkpoint_storage::forget_prepared(checkpoint_id up_to) {
  durable_names_.erase(durable_names_.begin(), durable_names_.upper_bound(up_to));
}

runtime::task<io::result<void>> checkpoint_storage::commit_manifest(checkpoint_manifest manifest) {
  const checkpoint_id id = manifest.checkpoint;
  const std::string what = fmt::format("commit checkpoint {}", id);
  if (id == no_checkpoint) {
    co_return io::error(std::make_error_code(std::errc::invalid_argument), what + ": checkpoint id 0");
  }
  for (const auto& f : manifest.files) {
    if (!is_valid_file_name(f.name)) {
      co_return io::error(std::make_error_code(std::errc::invalid_argument),
                          fmt::format("{}: invalid file name '{}'", what, f.name));
    }
  }
  unite_requires(manifest);
  for (const checkpoint_id required : manifest.requires_checkpoints) {
    if (required == no_checkpoint || required >= id) {
      co_return io::error(std::make_error_code(std::errc::invalid_argument),
                          fmt::format("{}: it cannot require checkpoint {} (only an id from 1 to {})", what, required,
                                      id - 1));
    }
  }
  // What it requires must still be there: a retention pass after a newer commit may have removed a
  // base that a delta frozen before that commit leans on (its table had not heard of the newer one).
  // Committing then would make a checkpoint recovery cannot read, after its sinks committed: refused,
  // the checkpoint aborts, and the tables take the newer base. (Retention and commits take turns on
  // the coordinator, so nothing removes the base between this check and the manifest.)
  for (const checkpoint_id required : manifest.requires_checkpoints) {
    auto base = co_await read_manifest(required);
    if (!base) {
      co_return with_code(storage_errc::missing_file, fmt::format("{}: it requires checkpoint {}, which is gone: {}", what,
                                                                  required, base.error().message()));
    }
  }
  for (const auto& entry : manifest.metadata) {
    if (!is_valid_metadata_key(entry.first)) {
      co_return io::error(std::make_error_code(std::errc::invalid_argument),
                          fmt::format("{}: invalid metadata key '{}'", what, entry.first));
    }
  }
  if (manifest.created_unix_ms == 0) manifest.created_unix_ms = now_unix_ms();
  const std::string dir = checkpoint_dir(id);
  const std::string path = fmt::format("{}/{}", dir, manifest_file_name);
  const bool prepared = names_durable(manifest);
  forget_prepared(id);  // whatever happens below, this id is decided (and older ones can never commit)

  std::optional<io::error> failed;
  if (prepared) {
    // Fast path: every directory entry recovery needs is durable already (prepare_checkpoint), so
    // only the manifest's bytes remain. `_manifest` exists and must still be empty.
    auto opened = co_await io::file::open(path, io::open_options{.read = false, .write = true});
    if (!opened) co_return prefixed(what, opened.error());
    io::file f = std::move(opened).value();
    auto size = co_await f.size();
    if (!size || *size != 0) {
      co_await close_quietly(&f);
      // Not ours to remove: someone else wrote it.
      if (!size) co_return prefixed(what, size.error());
      co_return io::error(std::make_error_code(std::errc::file_exists),
                          fmt::format("{}: '{}' already holds {} bytes", what, path, *size));
    }
    auto written = co_await write_durably(std::move(f), encode_manifest(manifest), true);
    if (!written) failed = written.error();
  } else {
    // Full path: create the manifest, make its bytes durable, then its entry in chk-<id>/ and the
    // chk-<id> entry in the root.
    auto opened = co_await io::file::open(path, io::open_options::create_or_truncate());
    if (!opened) {
      co_return prefixed(what, opened.error());
    }
    auto written = co_await write_durably(std::move(opened).value(), encode_manifest(manifest), false);
    if (!written) {
      failed = written.error();
    } else {
      auto dir_synced = co_await io::fsync_directory(dir);
      if (!dir_synced) {
        failed = dir_synced.error();
      } else {
        auto root_synced = co_await io::fsync_directory(root_);
        if (!root_synced) failed = root_synced.error();
      }
    }
  }
  if (failed) {
    // Not known durable, so not committed: take the manifest back rather than let a later recovery
    // find a checkpoint the coordinator was told had failed (a torn one would fail its CRC anyway).
    auto removed = co_await io::remove(path);
    (void)removed;
    co_return prefixed(what, *failed);
  }
  co_return io::success();
}

runtime::task<io::result<checkpoint_manifest>> checkpoint_storage::commit_verified(
    checkpoint_id id, checkpoint_mode mode, std::vector<task_id> tasks,
    std::map<std::string, std::vector<std::byte>> metadata) {
  checkpoint_manifest manifest;
  manifest.checkpoint = id;
  manifest.mode = mode;
  manifest.created_unix_ms = now_unix_ms();  // here, so the manifest returned is the one on disk
  manifest.metadata = std::move(metadata);
  for (const task_id task : tasks) {
    auto entry = co_await describe_state_file(id, task);
    if (!entry) co_return prefixed(fmt::format("commit checkpoint {}", id), entry.error());
    manifest.files.push_back(std::move(entry).value());
  }
  unite_requires(manifest);  // (commit_manifest does too: here for the manifest returned)
  auto committed = co_await commit_manifest(manifest);
  if (!committed) co_return std::move(committed).error();
  co_return manifest;
}

runtime::task<io::result<checkpoint_manifest>> checkpoint_storage::read_manifest(checkpoint_id id) {
  const std::string path = fmt::format("{}/{}", checkpoint_dir(id), manifest_file_name);
  const std::string manifest_label = label(id, manifest_file_name);
  auto opened = co_await io::file::open(path, io::open_options::read_only());
  if (!opened) {
    if (is_enoent(opened.error())) {
      co_return with_code(storage_errc::missing_manifest,
                          fmt::format("open checkpoint manifest '{}': {} (never committed: aborted, or still being "
                                      "written)",
                                      path, opened.error().code().message()));
    }
    co_return io::error(opened.error().code(),
                        fmt::format("open checkpoint manifest '{}': {}", path, opened.error().code().message()));
  }
  io::file f = std::move(opened).value();
  auto size = co_await f.size();
  std::optional<io::error> failed;
  std::string text;
  if (!size) {
    failed = size.error();
  } else if (*size == 0) {
    // Created by prepare_checkpoint and never written: exactly like a missing manifest.
    failed = with_code(storage_errc::missing_manifest,
                       fmt::format("checkpoint manifest '{}' is empty (never committed: aborted, or still being "
                                   "written)",
                                   path));
  } else if (*size > max_manifest_bytes) {
    failed = with_code(storage_errc::bad_manifest, fmt::format("{}: {} bytes, above the limit {}", manifest_label,
                                                               *size, max_manifest_bytes));
  } else {
    text.resize(*size);
    auto got = co_await f.read_full(std::as_writable_bytes(std::span<char>(text.data(), text.size())), 0);
    if (got) text.resize(*got); else failed = got.error();
  }
  auto closed = co_await f.close();
  (void)closed;  // a read-only close failing loses nothing
  if (failed) co_return std::move(*failed);
  auto manifest = decode_manifest(text, manifest_label);
  if (!manifest) co_return std::move(manifest).error();
  if (manifest->checkpoint != id) {
    co_return with_code(storage_errc::bad_manifest,
                        fmt::format("{}: names checkpoint {} (expected {})", manifest_label, manifest->checkpoint, id));
  }
  co_return manifest;
}

runtime::task<io::result<checkpoint_manifest>> checkpoint_storage::check(checkpoint_id id, std::vector<task_state>* keep,
                                                                       checkpoint_info* info, validity_memo* memo,
                                                                       checked_files* files) {
  auto manifest = co_await read_manifest(id);
  if (!manifest) co_return std::move(manifest).error();
  if (info != nullptr) {
    info->has_manifest = true;
    info->mode = manifest->mode;
    info->created_unix_ms = manifest->created_unix_ms;
    info->tasks = manifest->files.size();
    for (const auto& f : manifest->files) {
      info->written_bytes += f.size_bytes;
      info->operator_state_bytes += f.operator_state_bytes;
      info->channel_state_bytes += f.channel_state_bytes;
    }
    info->size_bytes = info->written_bytes;
    info->requires_checkpoints = manifest->requires_checkpoints;
  }
  std::set<task_id> tasks_seen;
  std::vector<std::pair<const manifest_file*, std::vector<checkpoint_id>>> deltas;  // files with bases
  checked_files own;
  for (const auto& f : manifest->files) {
    const std::string file_label = label(id, f.name);
    const std::optional<task_id> task = task_of_file_name(f.name);
    // load(): a required checkpoint's file on a chain keeps its operator records as it is validated.
    std::vector<task_state> link;
    std::vector<task_state>* into = keep != nullptr || !memo->keep_names.contains(f.name) ? keep : &link;
    auto summary = co_await check_file(fmt::format("{}/{}", checkpoint_dir(id), f.name), file_label,
                                       {.checkpoint = id, .task = task}, into);
    if (!summary) co_return std::move(summary).error();
    if (auto listed = matches_manifest(f, *summary, file_label); !listed) co_return std::move(listed).error();
    if (!tasks_seen.insert(summary->task).second) {
      co_return with_code(storage_errc::bad_manifest,
                          fmt::format("{}: task {} has another state file in this checkpoint", file_label, summary->task));
    }
    // A base the manifest does not require would be one retention may remove under it.
    for (const checkpoint_id base : summary->bases) {
      if (!std::binary_search(manifest->requires_checkpoints.begin(), manifest->requires_checkpoints.end(), base)) {
        co_return with_code(storage_errc::bad_manifest,
                            fmt::format("{}: operator state based on chk-{}, which the manifest does not require",
                                        file_label, base));
      }
    }
    own[f.name] = checked_file{f.size_bytes, std::move(summary->operator_bases), chain_link_of(link)};
    if (!summary->bases.empty()) deltas.emplace_back(&f, std::move(summary->bases));
  }
  if (keep != nullptr) {
    for (const auto& [f, bases] : deltas) memo->keep_names.insert(f->name);  // before any base is checked
  }
  // Newest first: a chain is then checked from its head, each link once (memo).
  std::map<checkpoint_id, const checked_checkpoint*> required;
  for (auto it = manifest->requires_checkpoints.rbegin(); it != manifest->requires_checkpoints.rend(); ++it) {
    const checked_checkpoint* base = co_await check_required(*it, memo);
    if (base->invalid) {
      co_return io::error(base->invalid->code(), fmt::format("chk-{}: requires chk-{}, which is not valid: {}", id,
                                                             *it, base->invalid->message()));
    }
    required.emplace(*it, base);
  }
  // A delta is on the same task's file: its base checkpoint must have one.
  for (const auto& [f, bases] : deltas) {
    for (const checkpoint_id base : bases) {
      if (!required.at(base)->files.contains(f->name)) {
        co_return with_code(storage_errc::missing_file,
                            fmt::format("{}: operator state based on chk-{}, whose manifest lists no {}",
                                        label(id, f->name), base, f->name));
      }
    }
  }
  if (info != nullptr) info->state_bytes = restore_read_bytes(own, *memo);
  if (files != nullptr) *files = std::move(own);
  co_return manifest;
}

const checkpoint_storage::checked_checkpoint* checkpoint_storage::remember(
    checkpoint_id id, const io::result<checkpoint_manifest>& checked, checked_files files, validity_memo* memo) {
  checked_checkpoint verdict;
  if (checked) {
    verdict.files = std::move(files);
  } else {
    verdict.invalid = checked.error();
  }
  return &memo->checked.insert_or_assign(id, std::move(verdict)).first->second;
}

runtime::task<const checkpoint_storage::checked_checkpoint*> checkpoint_storage::check_required(checkpoint_id id,
                                                                                              validity_memo* memo) {
  if (auto it = memo->checked.find(id); it != memo->checked.end()) co_return &it->second;
  checked_files files;
  auto checked = co_await check(id, nullptr, nullptr, memo, &files);  // ids strictly fall: the recursion ends
  co_return remember(id, checked, std::move(files), memo);
}

}  // namespace sluice::snapshot
