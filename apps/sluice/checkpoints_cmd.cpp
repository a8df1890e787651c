// `sluice checkpoints`: lists every chk-<id> directory under DIR, newest first, each validated end
// to end exactly as recovery validates it (manifest checksum, then every state file's records,
// size and CRC32C), and marks the one a job started now would resume from.
//
// The validation runs on an io_uring executor (runtime::sync_wait); only the listing of DIR itself
// is a blocking readdir (checkpoint_storage.hpp explains why). Output is pure formatting
// (snapshot/checkpoint_report.hpp): a table and a summary line, or one JSON object per line.
// Then the checkpoint history the jobs kept in DIR/history.jsonl (checkpoints_history.hpp).

#include "checkpoints_cmd.hpp"
#include "checkpoints_history.hpp"
#include "cli_options.hpp"

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/snapshot/checkpoint_history.hpp>
#include <sluice/snapshot/checkpoint_report.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <fmt/core.h>

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

namespace sluice::apps {
namespace {

namespace rt = sluice::runtime;
namespace snap = sluice::snapshot;

constexpr int exit_listed = 0;
constexpr int exit_unreadable = 1;
constexpr int exit_no_directory = 2;

constexpr const char* columns_help = R"(
Lists every checkpoint directory chk-<id> under DIR, newest first, and validates each one end to end
as recovery would (manifest checksum, every state file's records, size and CRC32C).

Columns:
  ID             the checkpoint directory, chk-<id>
  MODE           aligned, unaligned, aligned_timeout or at_least_once (from the manifest)
  TASKS          tasks with a state file in the checkpoint
  OPERATOR       bytes of operator state, all tasks
  CHANNEL        bytes of channel state (in-flight buffers of unaligned checkpoints), all tasks
  WRITTEN        bytes of the checkpoint's own state files (not of the checkpoints it requires)
  STATE          the full state: bytes a recovery from it reads, its own files and, for a delta,
                 the same task's files down each delta operator's chain (whole, each once);
                 "-" unless the checkpoint is valid
  REQUIRES       the checkpoints whose state this one's is a delta on (incremental checkpoints):
                 it is valid only if they are, and retention keeps them while it keeps this one
  CREATED (UTC)  when the checkpoint was committed (manifest), ISO-8601
  STATUS         valid, or invalid (<fault>): <reason>, where fault is one of missing-manifest,
                 bad-manifest, missing-file, size-mismatch, bad-checksum, truncated, bad-format,
                 io-error
"<- resume point" marks the checkpoint a job started now resumes from: the newest valid one.
A checkpoint without a readable manifest shows "-" for what only the manifest knows.

Then the history jobs keep in DIR/history.jsonl across restarts (newest --recent of each):
  checkpoints   trigger time, mode, duration (trigger to end), alignment (the longest task's),
                state sizes, and outcome: completed, or aborted (<reason>): <detail>, and whether
                it switched from aligned to unaligned (aligned_timeout), at which tasks
  per task      of the last completed checkpoint: start delay (trigger to the task's snapshot;
                "-" for a task of another worker, whose clock is not the leader's), alignment,
                state write, fsync, state sizes, and whether it went unaligned
  starts        each start: the checkpoint it resumed from, and how long the restore took
  counts        completed, aborted by reason, switched to unaligned, starts, restores

--json prints one object per checkpoint per line and nothing else on stdout, with the fields
id, status ("valid"|"invalid"), reason, fault, mode, tasks, operator_state_bytes,
channel_state_bytes, size_bytes, written_bytes (both the checkpoint's own files), state_bytes
(STATE), requires (an array of ids), created_unix_ms, resume_point (null where unknown); then the
history's events as the file holds them (objects with "event": "checkpoint" or "start"), and one
{"event": "summary", ...} with the counts and the last completed checkpoint.

Exit status: 0 when DIR was listed (even if some checkpoints are invalid), 1 when DIR cannot be
listed, 2 when DIR does not exist or is not a directory.)";

rt::task<io::result<std::vector<snap::checkpoint_info>>> list_checkpoints(std::string dir) {
  snap::checkpoint_storage storage(std::move(dir));
  auto listed = co_await storage.list();
  co_return listed;
}

void print(std::string_view text) { std::fwrite(text.data(), 1, text.size(), stdout); }

}  // namespace

void add_checkpoints_options(CLI::App& command, checkpoints_options& o) {
  command.add_option("DIR", o.dir, "The checkpoint directory (the storage root holding chk-<id>/)")->required();
  command.add_flag("--json", o.json, "Print one JSON object per checkpoint per line, nothing else on stdout");
  add_number_option(command, "--recent", o.recent, "How many of the newest checkpoints and starts of the history to show",
                    1, 1'000'000);
  command.footer(columns_help);
}

int run_checkpoints(const checkpoints_options& o) {
  // checkpoint_storage treats a missing root as "nothing stored yet" (right for a job starting
  // fresh); from the command line a missing DIR is far more likely a typo.
  std::error_code ec;
  const auto type = std::filesystem::status(o.dir, ec).type();
  if (type == std::filesystem::file_type::not_found) {
    fmt::print(stderr, "sluice checkpoints: checkpoint directory '{}' does not exist\n", o.dir);
    return exit_no_directory;
  }
  if (ec) {
    fmt::print(stderr, "sluice checkpoints: stat '{}': {}\n", o.dir, ec.message());
    return exit_unreadable;
  }
  if (type != std::filesystem::file_type::directory) {
    fmt::print(stderr, "sluice checkpoints: '{}' is not a directory\n", o.dir);
    return exit_no_directory;
  }

  auto listed = rt::sync_wait(list_checkpoints(o.dir));
  if (!listed) {
    fmt::print(stderr, "sluice checkpoints: {}\n", listed.error().message());
    return exit_unreadable;
  }
  const std::vector<snap::checkpoint_info>& infos = *listed;
  const snap::checkpoint_id resume = snap::resume_point(infos);

  if (o.json) {
    for (auto it = infos.rbegin(); it != infos.rend(); ++it) print(snap::format_json_line(*it, resume));
    if (infos.empty()) fmt::print(stderr, "sluice checkpoints: no checkpoints in '{}'\n", o.dir);
  } else {
    print(snap::format_table(infos, resume));
    if (!infos.empty()) print("\n");
    print(snap::format_summary(infos, resume));
  }

  io::result<snap::history_contents> history = snap::read_history_blocking(o.dir);
  if (!history && history.error().code() == std::errc::no_such_file_or_directory) {
    if (o.json) {
      fmt::print(stderr, "sluice checkpoints: no checkpoint history in '{}'\n", o.dir);
    } else {
      print(fmt::format("\nNo checkpoint history in '{}' (no {}: no job of this version ran here yet).\n", o.dir,
                        snap::history_file_name));
    }
  } else if (!history) {
    fmt::print(stderr, "sluice checkpoints: {}\n", history.error().message());
  } else if (o.json) {
    print(format_history_json(*history, o.recent));
  } else {
    print("\n");
    print(format_history_text(*history, o.recent));
  }
  return std::fflush(stdout) == 0 ? exit_listed : exit_unreadable;
}

}  // namespace sluice::apps
