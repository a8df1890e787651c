// Checkpoint storage (see checkpoint_storage.hpp): which entries of the root are checkpoints
// (names, and directories only: a symlink named chk-<id> is set aside unread), the listing behind
// `sluice checkpoints` (validate() of each), and recovery's choice of the newest valid checkpoint.

#include <sluice/io/directory.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <fmt/format.h>

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <tuple>
#include <utility>

namespace sluice::snapshot {

namespace {

bool is_enoent(const io::error& e) noexcept { return e.code() == std::errc::no_such_file_or_directory; }

std::optional<std::uint64_t> parse_id(std::string_view digits) noexcept {
  std::uint64_t v = 0;
  if (digits.empty() || digits[0] == '0') return std::nullopt;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<checkpoint_id> checkpoint_storage::parse_dir_name(std::string_view text) noexcept {
  if (!text.starts_with("chk-")) return std::nullopt;
  const auto id = parse_id(text.substr(4));
  if (!id || *id > max_checkpoint_id) return std::nullopt;
  return id;
}

std::optional<std::string> checkpoint_storage::bad_dir_name_reason(std::string_view text) {
  if (!text.starts_with("chk-") || parse_dir_name(text)) return std::nullopt;
  const std::string_view digits = text.substr(4);
  const bool decimal = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!decimal) return std::string("the id is not a decimal number");
  if (digits == "0") return std::string("checkpoint id 0 means \"no checkpoint\"");
  if (digits[0] == '0') return std::string("the id has a leading zero");
  // Decimal, no leading zero, not valid: above the bound (or above 2^64).
  return fmt::format("checkpoint id {} is above the largest valid id {} (2^62)", digits, max_checkpoint_id);
}

runtime::task<io::result<checkpoint_storage::listing>> checkpoint_storage::scan() const {
  auto names = co_await io::list_directory(root_);  // readdir, off the executor
  if (!names) {
    if (is_enoent(names.error())) co_return listing{};  // nothing was ever stored
    co_return std::move(names).error();
  }
  listing out;
  for (const auto& name : *names) {
    if (auto id = parse_dir_name(name)) {
      // Looked at without following it: a symlink named chk-<id> is never read through, resumed
      // from or removed (it may point anywhere).
      const std::string path = fmt::format("{}/{}", root_, name);
      auto status = co_await io::entry_status(path);
      if (!status && is_enoent(status.error())) continue;  // removed since the listing
      if (!status) co_return std::move(status).error();
      if (S_ISDIR(status->mode)) {
        out.ids.push_back(*id);
        continue;
      }
      checkpoint_info info;
      info.id = *id;  // (still the base of the next id: chk-<id> cannot be made while it is there)
      info.name = name;
      info.path = path;
      info.fault = make_error_code(storage_errc::not_a_directory);
      info.reason = fmt::format("{}: not a checkpoint: {}; ignored: never read through, never resumed from, never "
                                "removed",
                                name, S_ISLNK(status->mode) ? "a symbolic link" : "not a directory");
      out.ignored.push_back(std::move(info));
    } else if (auto why = bad_dir_name_reason(name)) {
      checkpoint_info info;
      info.name = name;
      info.path = fmt::format("{}/{}", root_, name);
      info.fault = make_error_code(storage_errc::bad_name);
      info.reason = fmt::format("{}: not a checkpoint: {}; ignored: never resumed from, never removed, never the "
                                "base of the next id",
                                name, *why);
      out.ignored.push_back(std::move(info));
    }
  }
  std::sort(out.ids.begin(), out.ids.end());
  // Bad names (id 0) first, by name; then the other entries ignored, by id.
  std::sort(out.ignored.begin(), out.ignored.end(),
            [](const auto& a, const auto& b) { return std::tie(a.id, a.name) < std::tie(b.id, b.name); });
  co_return out;
}

runtime::task<io::result<std::vector<checkpoint_id>>> checkpoint_storage::list_ids() const {
  auto scanned = co_await scan();
  if (!scanned) co_return std::move(scanned).error();
  co_return std::move(scanned->ids);
}

runtime::task<io::result<std::vector<checkpoint_info>>> checkpoint_storage::list() {
  auto scanned = co_await scan();
  if (!scanned) co_return std::move(scanned).error();
  std::vector<checkpoint_info> infos = std::move(scanned->ignored);
  validity_memo memo;  // ascending: a checkpoint's bases are validated before it, each once
  for (const checkpoint_id id : scanned->ids) infos.push_back(co_await validate_with(id, &memo));
  // Ascending by id: bad names (id 0) first, by name; a symlink chk-<id> among the checkpoints.
  std::stable_sort(infos.begin(), infos.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  co_return infos;
}

runtime::task<io::result<recovery_choice>> checkpoint_storage::newest_valid(std::map<checkpoint_id, std::string> rejected,
                                                                       checkpoint_id newest_allowed) {
  auto scanned = co_await scan();
  if (!scanned) co_return std::move(scanned).error();
  recovery_choice choice;
  for (auto& info : scanned->ignored) {
    runtime::log::warn("recovery: ignoring '{}' ({}): {}", info.path, fault_name(info.fault), info.reason);
    choice.ignored.push_back(std::move(info));
  }
  const std::vector<checkpoint_id>* ids = &scanned->ids;
  validity_memo memo;  // checkpoints sharing bases have them checked once
  for (auto it = ids->rbegin(); it != ids->rend(); ++it) {
    if (*it > newest_allowed) {
      checkpoint_info beyond;
      beyond.id = *it;
      beyond.path = fmt::format("{}/chk-{}", root_, *it);
      beyond.fault = make_error_code(storage_errc::unrestorable);
      beyond.reason = fmt::format("newer than the job's latest completed checkpoint {}: it never completed", newest_allowed);
      runtime::log::info("recovery: skipping checkpoint {}: {}", beyond.id, beyond.reason);
      choice.skipped.push_back(std::move(beyond));
      continue;
    }
    checkpoint_info info = co_await validate_with(*it, &memo);
    if (auto r = rejected.find(*it); info.valid && r != rejected.end()) {
      info.valid = false;
      info.fault = make_error_code(storage_errc::unrestorable);
      info.reason = r->second;
    }
    if (info.valid) {
      runtime::log::info("recovery: checkpoint {} validates end to end ({} tasks)", info.id, info.tasks);
      choice.chosen = std::move(info);
      break;
    }
    if (info.fault && info.fault.category() != storage_category()) {
      // The checkpoint could not be read (EIO, EMFILE, ...), which says nothing about its content:
      // falling back to an older one would silently throw away committed work. Fail instead; a
      // retry reads it again. (The simulation found recovery skipping a good checkpoint on one
      // injected EIO.)
      co_return io::error(info.fault, fmt::format("recovery: checkpoint {} could not be read, so no older one is "
                                                  "tried (remove '{}' to resume from an older one): {}",
                                                  info.id, info.path, info.reason));
    }
    runtime::log::warn("recovery: skipping checkpoint {} ({}): {}", info.id, fault_name(info.fault), info.reason);
    choice.skipped.push_back(std::move(info));
  }
  if (!choice.chosen && !ids->empty()) {
    runtime::log::warn("recovery: none of the {} checkpoints under '{}' is valid", ids->size(), root_);
  }
  co_return choice;
}

runtime::task<checkpoint_info> checkpoint_storage::validate(checkpoint_id id) {
  validity_memo memo;
  co_return co_await validate_with(id, &memo);
}

runtime::task<checkpoint_info> checkpoint_storage::validate_with(checkpoint_id id, validity_memo* memo) {
  checkpoint_info info;
  info.id = id;
  info.name = fmt::format("chk-{}", id);
  info.path = checkpoint_dir(id);
  checked_files files;
  auto checked = co_await check(id, nullptr, &info, memo, &files);
  info.valid = checked.ok();
  if (!checked) {
    info.fault = checked.error().code();
    info.reason = checked.error().message();
  }
  remember(id, checked, std::move(files), memo);
  co_return info;
}

}  // namespace sluice::snapshot
