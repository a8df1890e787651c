// Checkpoint storage (see checkpoint_storage.hpp): load(), which hands recovery every task's state,
// and for an operator whose state is a delta (incremental checkpoints), the states of the earlier
// links of its chain.
//
// The chain of operator i of task t in checkpoint N: N's file names base B1 for i (an operator_base
// record), B1's file of task t holds i's state and may name B2, and so on down to a file holding i's
// whole state. Bases strictly fall (the reader checks each is below its file's checkpoint), so the
// walk ends. Each base file is read once per load (one task's file serves all its operators) and
// checked against its checkpoint's manifest; check() has already validated every checkpoint N
// requires, down the chain, before any of this runs.

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

bool is_enoent(const io::error& e) noexcept { return e.code() == std::errc::no_such_file_or_directory; }

}  // namespace

// The base files one load() reads, each once: (checkpoint, task) -> its state (channel state
// dropped), and the base checkpoints' manifests.
struct checkpoint_storage::base_file_cache {
  std::map<std::pair<checkpoint_id, task_id>, task_state> files;
  std::map<checkpoint_id, checkpoint_manifest> manifests;
};

runtime::task<io::result<task_state*>> checkpoint_storage::base_file(checkpoint_id id, task_id task, std::string why,
                                                                     base_file_cache* cache) {
  const std::pair<checkpoint_id, task_id> key{id, task};
  if (auto it = cache->files.find(key); it != cache->files.end()) co_return &it->second;
  const std::string name = state_file_name(task);
  const std::string file_label = label(id, name);
  auto known = cache->manifests.find(id);
  if (known == cache->manifests.end()) {
    auto manifest = co_await read_manifest(id);
    if (!manifest) {
      co_return io::error(manifest.error().code(), fmt::format("{} ({})", manifest.error().message(), why));
    }
    known = cache->manifests.emplace(id, std::move(manifest).value()).first;
  }
  const auto& files = known->second.files;
  const auto entry = std::find_if(files.begin(), files.end(), [&](const manifest_file& f) { return f.name == name; });
  if (entry == files.end()) {
    co_return with_code(storage_errc::missing_file,
                        fmt::format("{}: missing base state file: chk-{}'s manifest lists no {} ({})", file_label, id,
                                    name, why));
  }
  const std::string path = state_file_path(id, task);
  auto state = co_await read_state_file(path, file_label, {.checkpoint = id, .task = task});
  if (!state && is_enoent(state.error())) {
    co_return with_code(storage_errc::missing_file, fmt::format("{}: missing base state file: open '{}': {} ({})",
                                                                file_label, path, state.error().code().message(), why));
  }
  if (!state) co_return io::error(state.error().code(), fmt::format("{} ({})", state.error().message(), why));
  // Read again after check(): it must still be the file the manifest vouches for.
  if (state->summary.size_bytes != entry->size_bytes || state->summary.crc32c != entry->crc32c) {
    co_return with_code(storage_errc::bad_checksum,
                        fmt::format("{}: the manifest says {} bytes with CRC32C {:08x}, the file has {} with "
                                    "{:08x} ({})",
                                    file_label, entry->size_bytes, entry->crc32c, state->summary.size_bytes,
                                    state->summary.crc32c, why));
  }
  state->input_channels.clear();  // a chain needs operator state only
  state->output_channels.clear();
  co_return &cache->files.emplace(key, std::move(state).value()).first->second;
}

runtime::task<io::result<void>> checkpoint_storage::load_chains(checkpoint_id id, task_state* state,
                                                                base_file_cache* cache) {
  const task_id task = state->summary.task;
  const std::string name = state_file_name(task);
  for (const auto& [op, first_base] : state->operator_bases) {
    std::vector<std::vector<std::byte>> chain;  // newest first while walking
    checkpoint_id at = id;
    for (checkpoint_id base = first_base; base != no_checkpoint;) {
      assert(base < at);  // the parser's check: the walk ends
      const std::string why = fmt::format("operator {} of {} is based on it", op, label(at, name));
      auto file = co_await base_file(base, task, why, cache);
      if (!file) co_return std::move(file).error();
      auto bytes = (*file)->operator_state.find(op);
      if (bytes == (*file)->operator_state.end()) {
        co_return with_code(storage_errc::bad_format,
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
  co_return io::success();
}

// What load() reads, counted: the checkpoint's own files (check() reads each whole), then what
// load_chains() reads through base_file(): per (task, operator) chain, the same task's file of each
// link, whole and once per (checkpoint, task). Mirrors load_chains' walk on what check() recorded.
std::uint64_t checkpoint_storage::restore_read_bytes(const checked_files& own, const validity_memo& memo) {
  std::uint64_t bytes = 0;
  std::set<std::pair<checkpoint_id, std::string>> read;  // base files counted
  for (const auto& [name, file] : own) {
    bytes += file.size_bytes;
    for (const auto& [op, first_base] : file.operator_bases) {
      for (checkpoint_id base = first_base; base != no_checkpoint;) {
        // check() validated every base (in memo, valid) and that it lists this file.
        const checked_file& link = memo.at(base).files.at(name);
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
  base_file_cache cache;
  for (task_state& state : loaded.tasks) {
    auto chained = co_await load_chains(id, &state, &cache);
    if (!chained) co_return std::move(chained).error();
  }
  co_return loaded;
}

}  // namespace sluice::snapshot
