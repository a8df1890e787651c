#pragma once
// stdout_sink: a demo line sink that writes each line + '\n' to standard output (or any descriptor
// it is given), through io_uring writes at the descriptor's current position, so it never blocks
// the executor. It does not own the descriptor.
//
// No delivery guarantee: it takes no part in checkpoints, so after a recovery the lines since the
// resumed checkpoint appear again (use exactly_once_file_sink for exactly-once output). Lines are
// buffered (64 KiB) and written when the buffer fills, on flush(), and on close(); a line is copied
// before the first suspension, so `line` need not outlive the call.
//
//   stdout_sink out;
//   co_await out.write("hello");
//   co_await out.close();   // flushes

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace sluice::dataflow {

class stdout_sink {
 public:
  static constexpr std::size_t buffer_bytes = 64 * 1024;

  explicit stdout_sink(int fd = 1);

  runtime::task<io::result<void>> write(std::string_view line);
  runtime::task<io::result<void>> flush();
  // Flushes; the descriptor stays open (it is not ours).
  runtime::task<io::result<void>> close() { return flush(); }

  std::uint64_t lines_written() const noexcept { return lines_; }

 private:
  int fd_;
  std::vector<char> buffer_;
  std::uint64_t lines_ = 0;
};

}  // namespace sluice::dataflow
