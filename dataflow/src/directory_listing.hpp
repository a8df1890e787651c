#pragma once
// Listing a directory's entry names with opendir/readdir. io_uring has no "read directory" op, so
// this is a BLOCKING metadata call on the calling thread. dataflow/ uses it once per sink task at
// start-up (exactly_once_file_sink::recover), never on the per-record or per-checkpoint path.
// (Mirrors snapshot/src/directory_listing, which is private to snapshot/.)

#include <sluice/io/result.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace sluice::dataflow::detail {

inline constexpr std::size_t max_directory_entries = 1u << 20;

// Every name in `dir` but "." and "..", unsorted. Errors: "list directory '<dir>': <strerror>".
io::result<std::vector<std::string>> list_directory_blocking(const std::string& dir);

}  // namespace sluice::dataflow::detail
