// Checkpoint storage (see checkpoint_storage.hpp): load(), which hands recovery every task's state,
// and for an operator whose state is a delta (incremental checkpoints), the states of the earlier
// links of its chain.
//
// The chain of operator i of task t in checkpoint N: N's file names base B1 for i (an operator_base
// record), B1's file of task t holds i's state and may name B2, and so on down to a file holding i's
// whole state. Bases strictly fall (the reader checks each is below its file's checkpoint), so the
// walk ends. No base file is read here: check(), validating every checkpoint N requires down the
// chain, read each base file once and kept the operator records of task t's files (the names of N's
// delta files, validity_memo::keep_names) as it validated them; load_chains takes the bytes from
// there.

#include <sluice/snapshot/checkpoint_storage.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <set>
#include <string>
#include <utility>

namespace sluice::snapshot {

namespace {

io::error with_code(storage_errc code, std::string message) { return io::error(make_error_code(code), std::move(message)); }

}  // namespace

io::result<task_state*> checkpoint_storage::chain_link(checkpoint_id id, const std::string& name,
                                                      const std::string& why, validity_memo* memo) const {
  const std::string file_label = label(id, name);
  // check() validated every checkpoint the loaded one requires, down its chains, in this memo.
  const auto checked = memo->checked.find(id);
  if (checked == memo->checked.end() || checked->second.invalid) {
    return with_code(storage_errc::bad_manifest,
                     fmt::format("{}: base checkpoint chk-{} was not validated ({})", file_label, id, why));
  }
  const auto file = checked->second.files.find(name);
  if (file == checked->second.files.end()) {
    return with_code(storage_errc::missing_file, fmt::format("{}: missing base state file: chk-{}'s manifest lists "
                                                             "no {} ({})",
                                                             file_label, id, name, why));
  }
  assert(file->second.kept != nullptr);  // check() keeps every file named in keep_names
  if (file->second.kept == nullptr) {
    return with_code(storage_errc::missing_file, fmt::format("{}: base state file not kept ({})", file_label, why));
  }
  return file->second.kept.get();
}

io::result<void> checkpoint_storage::load_chains(checkpoint_id id, task_state* state, validity_memo* memo) const {
  const std::string name = state_file_name(state->summary.task);
  for (const auto& [op, first_base] : state->operator_bases) {
    std::vector<std::vector<std::byte>> chain;  // newest first while walking
    checkpoint_id at = id;
    for (checkpoint_id base = first_base; base != no_checkpoint;) {
      assert(base < at);  // the parser's check: the walk ends
      const std::string why = fmt::format("operator {} of {} is based on it", op, label(at, name));
      auto file = chain_link(base, name, why, memo);
      if (!file) return std::move(file).error();
      auto bytes = (*file)->operator_state.find(op);
      if (bytes == (*file)->operator_state.end()) {
        return with_code(storage_errc::bad_format,
                         fmt::format("{}: holds no state of operator {} ({})", label(base, name), op, why));
      }
      chain.push_back(std::move(bytes->second));  // one chain per (task, operator): taken once
      (*file)->operator_state.erase(bytes);
      const auto next = (*file)->operator_bases.find(op);
      at = base;
      base = next == (*file)->operator_bases.end() ? no_checkpoint : next->second;
    }
    std::reverse(chain.begin(), chain.end());
    state->operator_chain[op] = std::move(chain);
  }
  return io::success();
}

// What load() reads to restore, counted: the checkpoint's own files (check() reads each whole), then
// per (task, operator) chain the same task's file of each link, whole and once per (checkpoint,
// task) (check() reads it, keeping its operator records). Mirrors load_chains' walk on what check()
// recorded.
std::uint64_t checkpoint_storage::restore_read_bytes(const checked_files& own, const validity_memo& memo) {
  std::uint64_t bytes = 0;
  std::set<std::pair<checkpoint_id, std::string>> read;  // base files counted
  for (const auto& [name, file] : own) {
    bytes += file.size_bytes;
    for (const auto& [op, first_base] : file.operator_bases) {
      for (checkpoint_id base = first_base; base != no_checkpoint;) {
        // check() validated every base (in memo, valid) and that it lists this file.
        const checked_file& link = memo.checked.at(base).files.at(name);
        if (read.emplace(base, name).second) bytes += link.size_bytes;
        const auto next = link.operator_bases.find(op);
        base = next == link.operator_bases.end() ? no_checkpoint : next->second;
      }
    }
  }
  return bytes;
}

runtime::task<io::result<loaded_checkpoint>> checkpoint_storage::load(checkpoint_id id) {
  loaded_checkpoint loaded;
  validity_memo memo;
  auto checked = co_await check(id, &loaded.tasks, nullptr, &memo);  // the checkpoints it requires too
  if (!checked) co_return std::move(checked).error();
  loaded.manifest = std::move(checked).value();
  for (task_state& state : loaded.tasks) {
    io::result<void> chained = load_chains(id, &state, &memo);
    if (!chained) co_return std::move(chained).error();
  }
  co_return loaded;
}

}  // namespace sluice::snapshot
