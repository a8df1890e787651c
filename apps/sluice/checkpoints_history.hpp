#pragma once
// The checkpoint history part of `sluice checkpoints DIR` (snapshot/checkpoint_history.hpp): the
// recent checkpoints, the last completed one per task, the restores, and counts. Pure formatting of
// what read_history_blocking read.

#include <sluice/snapshot/checkpoint_history.hpp>

#include <chrono>
#include <cstddef>
#include <string>

namespace sluice::apps {

// Tables and a counts line; `recent`: how many of the newest checkpoints (and starts) are listed.
std::string format_history_text(const snapshot::history_contents& history, std::size_t recent);
// One JSON object per line: every event as the file holds it (fields "v" and "event"), newest
// `recent` checkpoints and starts only, then {"event":"summary",...} with the counts and the last
// completed checkpoint.
std::string format_history_json(const snapshot::history_contents& history, std::size_t recent);
// "1.2ms", "850us", "3.40s".
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace sluice::apps
