#pragma once
// What `sluice checkpoints` prints about a checkpoint directory: pure formatting of the
// checkpoint_info list that checkpoint_storage::list() returns. Nothing here touches the disk.
//
//   auto infos = co_await storage.list();                      // validated end to end
//   const checkpoint_id resume = resume_point(*infos);         // what recovery would choose
//   std::fputs(format_table(*infos, resume).c_str(), stdout);  // or format_json_line per info
//
// The resume point follows newest_valid(): the newest checkpoint that validates end to end.
// Fields a checkpoint without a readable manifest cannot have (mode, tasks, bytes, requires, time)
// print as "-" in the table and as null in JSON. Bytes are the checkpoint's own files (what it wrote):
// a delta checkpoint's size does not include the checkpoints it requires, which list their own. The
// full state (checkpoint_info::state_bytes: what a recovery from it reads, its chains' base files
// included) is known only for a valid checkpoint: "-" and null otherwise.

#include <sluice/snapshot/checkpoint.hpp>
#include <sluice/snapshot/checkpoint_storage.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::snapshot {

// The newest valid checkpoint of `infos` (in any order), or no_checkpoint if none is valid.
checkpoint_id resume_point(const std::vector<checkpoint_info>& infos) noexcept;

// "valid", or "invalid (<fault name>): <reason>".
std::string format_status(const checkpoint_info& info);

// "2024-04-01T19:33:20.123Z": a Unix time in milliseconds as ISO-8601 UTC.
std::string format_iso8601_utc(std::uint64_t unix_ms);

// "512 B", "5.3 KiB", "10.0 MiB", ...: binary units, one decimal above bytes.
std::string format_size(std::uint64_t size_bytes);

// `text` as a JSON string literal, quotes included. Control characters are escaped; bytes that are
// not valid UTF-8 (a path can hold any byte) become U+FFFD, so the output is always valid JSON.
std::string json_string(std::string_view text);

// One checkpoint as one line of JSON, '\n' included:
//   {"id":7,"status":"valid","reason":null,"fault":null,"mode":"unaligned","tasks":2,
//    "operator_state_bytes":8,"channel_state_bytes":10600,"size_bytes":10896,"written_bytes":10896,
//    "state_bytes":52000,"requires":[5,6],"created_unix_ms":1712000000000,"resume_point":true}
// size_bytes and written_bytes are equal (size_bytes is kept for older readers); state_bytes is the
// full state a recovery reads (null unless valid); requires is the checkpoints this one is a delta
// on ([] for none).
// `status` is "valid" or "invalid"; reason and fault (its name) are set when invalid. An entry
// whose name is not a valid id (fault "bad-name") has "id":null; its reason starts with the name.
std::string format_json_line(const checkpoint_info& info, checkpoint_id resume);

// The human table, newest first, with a header row and "<- resume point" after the chosen one.
// WRITTEN is the checkpoint's own files; STATE the full state a recovery from it reads ("-" unless
// valid); REQUIRES the checkpoints it is a delta on ("none").
// Columns are aligned; STATUS is last, so a long reason never pushes the others apart. "" when
// `infos` is empty.
std::string format_table(std::vector<checkpoint_info> infos, checkpoint_id resume);

// "3 checkpoints, 2 valid; a job started now resumes from chk-7" (or "... starts from scratch"),
// '\n' included; "no checkpoints\n" when `infos` is empty.
std::string format_summary(const std::vector<checkpoint_info>& infos, checkpoint_id resume);

}  // namespace sluice::snapshot
