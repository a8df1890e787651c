#pragma once
// Listing a directory's entry names with opendir/readdir. io_uring has no "read directory" op, so
// this is a BLOCKING metadata call on the calling thread: short for the small directories of
// checkpoint storage, and kept off the per-checkpoint path (used at start-up, by the CLI, and at
// most once per retention pass plus once per removed directory whose files are not all known).

#include <sluice/io/result.hpp>

#include <string>
#include <vector>

namespace sluice::snapshot::detail {

inline constexpr std::size_t max_directory_entries = 1u << 20;

// Every name in `dir` but "." and "..", unsorted. Errors: "list directory '<dir>': <strerror>".
io::result<std::vector<std::string>> list_directory_blocking(const std::string& dir);

}  // namespace sluice::snapshot::detail
