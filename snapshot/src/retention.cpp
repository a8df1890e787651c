// Retention (see checkpoint_storage.hpp): which checkpoint directories a pass keeps, and how one is
// removed.
//
// A pass lists <root> once (readdir on the executor's blocking-work pool), then reads the manifest of every directory (small
// text files, io_uring reads). "Committed" means the manifest decodes (an empty `_manifest`, made by
// prepare_checkpoint and never written, is uncommitted like a missing one): a pass does
// not re-read the data files (that is recovery's job), so it stays cheap enough to run after every
// checkpoint. Decisions:
//   - committed, newest K: kept;            - committed, older: removed;
//   - uncommitted, older than the newest committed: removed (aborted, or left by a crash);
//   - uncommitted, newer: kept (its writer may still be running); - `in_progress`: never touched.
// At start (at_start: no writer runs yet), every uncommitted directory but the newest of all goes,
// so a job whose checkpoints keep failing (a full disk) does not pile them up across restarts.

#include <sluice/io/file.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

namespace sluice::snapshot {

namespace {

bool is_enoent(const io::error& e) noexcept { return e.code() == std::errc::no_such_file_or_directory; }

// Unlinks `dir`/`name` for each name, `_manifest` first; a file already gone is fine.
runtime::task<io::result<void>> remove_files(std::string dir, std::vector<std::string> names) {
  std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n == manifest_file_name; });
  for (const auto& name : names) {
    auto removed = co_await io::remove(fmt::format("{}/{}", dir, name));
    if (!removed && !is_enoent(removed.error())) co_return removed;
  }
  co_return io::success();
}

}  // namespace

runtime::task<io::result<void>> checkpoint_storage::discard_unused(checkpoint_id id, std::vector<task_id> tasks) {
  // As a manifest would list them: remove_checkpoint_dir unlinks these and `_manifest` by name.
  checkpoint_manifest names;
  names.checkpoint = id;
  for (const task_id task : tasks) names.files.push_back({.name = state_file_name(task)});
  auto removed = co_await remove_checkpoint_dir(id, std::move(names));
  if (!removed && is_enoent(removed.error())) co_return io::success();
  co_return removed;
}

runtime::task<io::result<void>> checkpoint_storage::remove_checkpoint_dir(checkpoint_id id,
                                                                          std::optional<checkpoint_manifest> manifest) {
  const std::string dir = checkpoint_dir(id);
  if (manifest) {
    // Every file is known from the manifest: no listing needed unless something else is in there.
    std::vector<std::string> names{std::string(manifest_file_name), std::string(manifest_temp_file_name)};
    for (const auto& f : manifest->files) names.push_back(f.name);
    auto removed = co_await remove_files(dir, std::move(names));
    if (!removed) co_return removed;
    auto gone = co_await io::remove_directory(dir);
    if (gone || gone.error().code() != std::errc::directory_not_empty) co_return gone;
    runtime::log::debug("retention: chk-{} holds files its manifest does not list; listing it", id);
  }
  auto listed = co_await io::list_directory(dir);  // readdir, off the executor
  if (!listed) co_return std::move(listed).error();
  auto removed = co_await remove_files(dir, std::move(listed).value());
  if (!removed) co_return removed;
  co_return co_await io::remove_directory(dir);
}

runtime::task<io::result<retention_report>> checkpoint_storage::retain(checkpoint_id in_progress, bool at_start) {
  auto ids = co_await list_ids();
  if (!ids) co_return std::move(ids).error();

  // Which directories hold a committed checkpoint (the manifests, for removal without a listing).
  // The in-progress one is read too: once committed it counts toward K (it is never removed).
  std::map<checkpoint_id, checkpoint_manifest> committed;
  std::vector<checkpoint_id> uncommitted;
  for (const checkpoint_id id : *ids) {
    auto manifest = co_await read_manifest(id);
    if (manifest) {
      committed.emplace(id, std::move(manifest).value());
    } else if (id != in_progress) {
      uncommitted.push_back(id);
    }
  }
  std::vector<checkpoint_id> newest_first;
  for (const auto& entry : committed) newest_first.push_back(entry.first);
  std::reverse(newest_first.begin(), newest_first.end());

  retention_report report;
  std::vector<checkpoint_id> doomed;
  for (std::size_t i = 0; i < newest_first.size(); ++i) {
    if (i < options_.retained_checkpoints) {
      report.kept.push_back(newest_first[i]);
    } else if (newest_first[i] != in_progress) {
      doomed.push_back(newest_first[i]);
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
    auto removed = co_await remove_checkpoint_dir(id, std::move(manifest));
    if (removed) {
      durable_names_.erase(id);
      report.removed.push_back(id);
    } else {
      runtime::log::warn("retention: could not remove chk-{}: {}", id, removed.error().message());
      report.failures.push_back(removed.error().message());
    }
  }
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
