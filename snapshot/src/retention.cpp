// Retention (see checkpoint_storage.hpp): which checkpoint directories a pass keeps, and how one is
// removed.
//
// A pass lists <root> once (readdir on the executor's blocking-work pool), then reads the manifest of every directory (small
// text files, io_uring reads). "Committed" means the manifest decodes (an empty `_manifest`, made by
// prepare_checkpoint and never written, is uncommitted like a missing one): a pass does
// not re-read the data files (that is recovery's job), so it stays cheap enough to run after every
// checkpoint. Decisions:
//   - committed, newest K: kept;            - committed, older: removed, unless required (below);
//   - uncommitted, older than the newest committed: removed (aborted, or left by a crash);
//   - uncommitted, newer: kept (its writer may still be running); - `in_progress`: never touched.
//   - a manifest whose read fails (EIO): nothing decided about it in this pass (it may be committed,
//     and required by a kept one).
// Required: a kept checkpoint whose state is a delta needs the checkpoints its manifest requires
// (`requires`), and they theirs, so every committed checkpoint a kept one (or the committed
// in-progress one) requires, transitively through the manifests the pass read, is kept too, beyond
// K. A required checkpoint without a committed manifest is simply not there: nothing to keep (the
// one requiring it is invalid, which recovery finds). Once no kept checkpoint requires an old one
// (a newer full checkpoint took over), the next pass removes it.
// At start (at_start: no writer runs yet), every uncommitted directory but the newest of all goes,
// so a job whose checkpoints keep failing (a full disk) does not pile them up across restarts.
// "Removed" applies only to what sluice made (committed, or carrying the marker that
// create_checkpoint_dir puts in first); any other chk-<id> directory is left alone, with one warning
// (later passes of the same storage object skip it unread), or rmdir'ed if empty. A symlink named chk-<id> never reaches a pass
// (scan() sets it aside), and a removal holds the directory open with O_NOFOLLOW and unlinks
// relative to it, so a symlink swapped in meanwhile is not followed either.

#include <sluice/io/directory.hpp>
#include <sluice/io/file.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/plant.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <set>

namespace sluice::snapshot {

namespace {

bool is_enoent(const io::error& e) noexcept { return e.code() == std::errc::no_such_file_or_directory; }

// Whether a failed manifest read says what the directory is (no manifest, or one that does not
// decode: uncommitted), rather than that the read itself failed.
bool is_verdict(const io::error& e) noexcept {
  return e.code() == make_error_code(storage_errc::missing_manifest) ||
         e.code() == make_error_code(storage_errc::bad_manifest);
}

io::error not_ours(const std::string& dir) {
  return io::error(make_error_code(storage_errc::not_owned),
                   fmt::format("'{}' is not removed: it holds no {} marker and no committed manifest, so sluice did "
                               "not make it (or made it before markers existed); remove it by hand if nothing in it "
                               "is needed",
                               dir, checkpoint_marker_file_name));
}

// Unlinks each name in `dir` (relative to its descriptor: never through a symlink), `_manifest`
// first; a file already gone is fine.
runtime::task<io::result<void>> remove_files(io::directory* dir, std::vector<std::string> names) {
  std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n == manifest_file_name; });
  for (const auto& name : names) {
    auto removed = co_await dir->remove(name);
    if (!removed && !is_enoent(removed.error())) co_return removed;
  }
  co_return io::success();
}

// Whether `dir` carries sluice's marker: a regular file, not a symlink named like it.
runtime::task<io::result<bool>> is_marked(const io::directory* dir) {
  auto marker = co_await dir->entry_status(std::string(checkpoint_marker_file_name));
  if (marker) co_return S_ISREG(marker->mode);
  if (is_enoent(marker.error())) co_return false;
  co_return std::move(marker).error();
}

// What is in `dir` (opened as `held`) goes: the names known first, then, if the rmdir finds more, a
// listing. Nothing below `dir` is followed: each unlink is relative to `held`, and a subdirectory
// (which sluice never makes) fails the removal.
runtime::task<io::result<void>> empty_and_remove(io::directory* held, std::vector<std::string> known) {
  const std::string dir = held->path();
  if (!known.empty()) {
    auto removed = co_await remove_files(held, std::move(known));
    if (!removed) co_return removed;
    auto gone = co_await io::remove_directory(dir);
    if (gone || gone.error().code() != std::errc::directory_not_empty) co_return gone;
    runtime::log::debug("retention: '{}' holds files its manifest does not list; listing it", dir);
  }
  // (A listing by path: should the path name something else by now, what is unlinked is still only
  // in `held`.)
  auto listed = co_await io::list_directory(dir);  // readdir, off the executor
  if (!listed) co_return std::move(listed).error();
  auto removed = co_await remove_files(held, std::move(listed).value());
  if (!removed) co_return removed;
  co_return co_await io::remove_directory(dir);  // rmdir(2) never follows a symlink
}

}  // namespace

runtime::task<io::result<void>> checkpoint_storage::discard_unused(checkpoint_id id, std::vector<task_id> tasks) {
  std::vector<std::string> names;
  for (const task_id task : tasks) names.push_back(state_file_name(task));
  auto removed = co_await remove_checkpoint_dir(id, std::nullopt, std::move(names));
  if (!removed && is_enoent(removed.error())) co_return io::success();
  co_return removed;
}

runtime::task<io::result<void>> checkpoint_storage::remove_checkpoint_dir(checkpoint_id id,
                                                                          std::optional<checkpoint_manifest> manifest,
                                                                          std::vector<std::string> known) {
  const std::string path = checkpoint_dir(id);
  auto opened = co_await io::directory::open_no_follow(path);  // a symlink is refused here
  if (!opened) co_return std::move(opened).error();
  io::directory dir = std::move(opened).value();
  // Sluice's own: committed (a manifest that decodes), or marked when it was made.
  std::optional<io::error> failed;
  bool owned = manifest.has_value();
  if (!owned) {
    auto marked = co_await is_marked(&dir);
    if (!marked) failed = std::move(marked).error(); else owned = *marked;
  }
  if (!failed && !owned) {
    // An empty one holds nothing anyone wrote (a crash between its mkdir and its marker leaves it
    // so): rmdir removes it only if empty, and never follows a symlink.
    auto gone = co_await io::remove_directory(path);
    if (!gone) failed = gone.error().code() == std::errc::directory_not_empty ? not_ours(path) : gone.error();
  }
  if (!failed && owned) {
    if (manifest) {
      for (const auto& f : manifest->files) known.push_back(f.name);
    }
    if (!known.empty()) {
      known.insert(known.end(), {std::string(manifest_file_name), std::string(manifest_temp_file_name),
                                 std::string(checkpoint_marker_file_name)});
    }
    auto removed = co_await empty_and_remove(&dir, std::move(known));
    if (!removed) failed = std::move(removed).error();
  }
  auto closed = co_await dir.close();
  (void)closed;  // a read-only descriptor: nothing to lose
  if (failed) co_return std::move(*failed);
  co_return io::success();
}

runtime::task<io::result<retention_report>> checkpoint_storage::retain(checkpoint_id in_progress, bool at_start) {
  auto ids = co_await list_ids();
  if (!ids) co_return std::move(ids).error();

  // Which directories hold a committed checkpoint (the manifests, for removal without a listing).
  // The in-progress one is read too: once committed it counts toward K (it is never removed).
  std::map<checkpoint_id, checkpoint_manifest> committed;
  std::vector<checkpoint_id> uncommitted;
  retention_report report;
  for (const checkpoint_id id : *ids) {
    if (not_ours_.contains(id)) {  // found not sluice's by an earlier pass: not looked at again
      report.left_alone.push_back(id);
      continue;
    }
    auto manifest = co_await read_manifest(id);
    if (manifest) {
      committed.emplace(id, std::move(manifest).value());
    } else if (!is_verdict(manifest.error())) {
      // The read failed (EIO, say): the manifest may be a committed one that a kept checkpoint
      // requires (the simulation removed a chain's base so, at a restart), so nothing is decided
      // about it in this pass.
      runtime::log::warn("retention: chk-{} is left for a later pass: {}", id, manifest.error().message());
      report.unreadable.push_back(id);
    } else if (id != in_progress) {
      uncommitted.push_back(id);
    }
  }
  std::vector<checkpoint_id> newest_first;
  for (const auto& entry : committed) newest_first.push_back(entry.first);
  std::reverse(newest_first.begin(), newest_first.end());

  // The newest K, and what a kept one (or the in-progress one, never removed) requires. Newest first,
  // so a checkpoint is decided after every one that can require it (requires are older).
  std::vector<checkpoint_id> doomed;
  std::set<checkpoint_id> required;
  for (std::size_t i = 0; i < newest_first.size(); ++i) {
    const checkpoint_id id = newest_first[i];
    const bool kept = i < options_.retained_checkpoints || required.contains(id);
    if (kept) {
      report.kept.push_back(id);
    } else if (id != in_progress) {
      doomed.push_back(id);
    }
    // Planted: what a kept checkpoint requires is not kept (a shared file deleted while referenced).
    if ((kept || id == in_progress) && !SLUICE_PLANTED("retention-drops-base")) {
      const auto& needs = committed.at(id).requires_checkpoints;
      required.insert(needs.begin(), needs.end());
    }
  }
  if (at_start) {
    // No writer runs yet: every uncommitted directory is garbage (aborted, or cut short by a crash
    // or a full disk), but the newest directory of all, whose id the next one continues after.
    const checkpoint_id newest = ids->empty() ? no_checkpoint : ids->back();
    for (const checkpoint_id id : uncommitted) {
      if (id != newest) doomed.push_back(id);
    }
  } else if (!newest_first.empty()) {
    for (const checkpoint_id id : uncommitted) {
      if (id < newest_first.front()) doomed.push_back(id);
    }
  }
  std::sort(doomed.begin(), doomed.end());

  for (const checkpoint_id id : doomed) {
    std::optional<checkpoint_manifest> manifest;
    if (auto it = committed.find(id); it != committed.end()) manifest = std::move(it->second);
    auto removed = co_await remove_checkpoint_dir(id, std::move(manifest), {});
    if (removed) {
      durable_names_.erase(id);
      report.removed.push_back(id);
    } else if (removed.error().code() == storage_errc::not_owned) {
      report.left_alone.push_back(id);
      not_ours_.insert(id);
      runtime::log::warn("retention: {}", removed.error().message());  // once: later passes skip it
    } else {
      runtime::log::warn("retention: could not remove chk-{}: {}", id, removed.error().message());
      report.failures.push_back(removed.error().message());
    }
  }
  std::sort(report.left_alone.begin(), report.left_alone.end());
  co_return report;
}

// An aborted checkpoint's manifest, written before the abort (coordinator_commit.cpp), goes away,
// durably: until then recovery might take chk-<id> for committed.
runtime::task<io::result<void>> checkpoint_storage::withdraw_manifest(checkpoint_id id) {
  const std::string dir = checkpoint_dir(id);
  const std::string what = fmt::format("withdraw checkpoint {}", id);
  auto removed = co_await io::remove(fmt::format("{}/{}", dir, manifest_file_name));
  if (!removed && !is_enoent(removed.error())) co_return io::error(removed.error().code(), what + ": " + removed.error().message());
  auto synced = co_await io::fsync_directory(dir);
  if (!synced) co_return io::error(synced.error().code(), what + ": " + synced.error().message());
  co_return io::success();
}

}  // namespace sluice::snapshot
