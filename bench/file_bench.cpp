// file: sequential writes through sluice's io::file with several writes in flight, then fsync,
// against a plain pwrite(2) loop, then fsync(2). Both write the same bytes, in the same chunk size,
// to a fresh temporary file in --dir that is deleted afterwards; the timed window runs from the
// first write to the end of the fsync (open and close are outside it). Measurements alternate.

#include "bench.hpp"

#include <sluice/io/file.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace sluice::bench {
namespace {

namespace rt = sluice::runtime;

// Writers take the next chunk from a shared cursor (executor-local: no atomics needed).
rt::task<void> file_writer(io::file* f, const std::byte* data, std::uint64_t chunk_bytes, std::uint64_t total_bytes,
                           std::uint64_t* cursor) {
  while (*cursor < total_bytes) {
    const std::uint64_t offset = *cursor;
    const std::uint64_t n = std::min(chunk_bytes, total_bytes - offset);
    *cursor += n;
    (co_await f->write_all(std::span<const std::byte>(data, n), offset)).value();
  }
}

rt::task<double> sluice_write_seconds(std::string path, const std::byte* data, std::uint64_t chunk_bytes,
                                      std::uint64_t total_bytes, unsigned in_flight) {
  io::file f = (co_await io::file::open(path, io::open_options::create_or_truncate())).value();
  const auto start = bench_clock::now();
  std::uint64_t cursor = 0;
  rt::scope writers;
  for (unsigned i = 0; i < in_flight; ++i) writers.spawn(file_writer(&f, data, chunk_bytes, total_bytes, &cursor));
  co_await writers.join();
  (co_await f.fsync()).value();
  const double seconds = seconds_since(start);
  (co_await f.close()).value();
  co_return seconds;
}

double pwrite_seconds(const std::string& path, const std::byte* data, std::uint64_t chunk_bytes,
                      std::uint64_t total_bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), fmt::format("open '{}'", path));
  const auto start = bench_clock::now();
  std::uint64_t offset = 0;
  while (offset < total_bytes) {
    const std::uint64_t n = std::min(chunk_bytes, total_bytes - offset);
    std::uint64_t done = 0;
    while (done < n) {
      const ssize_t w = ::pwrite(fd, data + done, n - done, static_cast<off_t>(offset + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = w < 0 ? errno : EIO;
        ::close(fd);
        throw std::system_error(err, std::generic_category(), fmt::format("pwrite '{}'", path));
      }
      done += static_cast<std::uint64_t>(w);
    }
    offset += n;
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), fmt::format("fsync '{}'", path));
  }
  const double seconds = seconds_since(start);
  ::close(fd);
  return seconds;
}

// Deletes the temporary file when a measurement ends, however it ends.
class temp_file {
 public:
  temp_file(const std::string& dir, const char* tag)
      : path_(fmt::format("{}/sluice-bench-file-{}-{}.tmp", dir, ::getpid(), tag)) {}
  ~temp_file() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

std::string default_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

class file_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "file"; }
  std::string_view description() const noexcept override {
    return "sequential file writes + fsync: sluice io::file (writes in flight) vs a pwrite loop (bytes/s)";
  }
  std::vector<option> options() override {
    return {
        {"--bytes", "bytes written per measurement (each side)", &bytes_},
        {"--chunk-bytes", "bytes per write", &chunk_bytes_},
        {"--in-flight", "sluice: writes in flight", &in_flight_},
        {"--dir", "directory for the temporary file (default: $TMPDIR, else /tmp)", &dir_},
    };
  }

  void run(const common_options& common, const reporter& out) override {
    if (bytes_ == 0 || chunk_bytes_ == 0 || in_flight_ == 0) {
      throw std::invalid_argument("--bytes, --chunk-bytes and --in-flight must be at least 1");
    }
    if (chunk_bytes_ > (1u << 30)) throw std::invalid_argument("--chunk-bytes must be at most 1 GiB");
    const std::string dir = dir_.empty() ? default_dir() : dir_;
    if (!std::filesystem::is_directory(dir)) throw std::invalid_argument(fmt::format("--dir '{}' is not a directory", dir));

    std::vector<std::byte> data(chunk_bytes_);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
    const double total = static_cast<double>(bytes_);

    auto r = measure_paired(
        common.runs,
        [&] {
          temp_file tmp(dir, "sluice");
          return total / rt::sync_wait(sluice_write_seconds(tmp.path(), data.data(), chunk_bytes_, bytes_, in_flight_));
        },
        [&] {
          temp_file tmp(dir, "pwrite");
          return total / pwrite_seconds(tmp.path(), data.data(), chunk_bytes_, bytes_);
        });
    const double ratio = r.figure / r.baseline;
    out.result(name(),
               fmt::format("file: {}/s  baseline (pwrite loop) {}/s  ratio {:.2f}  ({} in {} writes, {} in flight, "
                           "then fsync; {})  target >= 0.9: {}",
                           human_bytes(r.figure), human_bytes(r.baseline), ratio, human_bytes(total),
                           human_bytes(static_cast<double>(chunk_bytes_)), in_flight_, dir,
                           ratio >= 0.9 ? "met" : "MISSED"),
               {{"bytes_per_s", r.figure},
                {"baseline_bytes_per_s", r.baseline},
                {"ratio", ratio},
                {"bytes", bytes_},
                {"chunk_bytes", chunk_bytes_},
                {"in_flight", std::uint64_t{in_flight_}},
                {"dir", dir},
                {"runs", std::uint64_t{common.runs}}});
  }

 private:
  std::uint64_t bytes_ = std::uint64_t{1} << 30;
  std::uint64_t chunk_bytes_ = 32 * 1024;
  unsigned in_flight_ = 16;
  std::string dir_;
};

registration<file_bench> reg;

}  // namespace
}  // namespace sluice::bench
