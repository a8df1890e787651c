// file: sequential writes through sluice's io::file with several writes in flight, then fsync,
// against a plain pwrite(2) loop, then fsync(2). Both write the same bytes, in the same chunk size,
// to a fresh temporary file in --dir that is deleted afterwards; the timed window runs from the
// first write to the end of the fsync (open and close are outside it). Measurements alternate.

#include "bench.hpp"

#include <sluice/io/file.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <fcntl.h>
#include <liburing.h>
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

// Seconds spent writing, then in the fsync.
struct phases {
  double write_s = 0;
  double fsync_s = 0;
  double total() const noexcept { return write_s + fsync_s; }
};

rt::task<phases> sluice_write_seconds(std::string path, const std::byte* data, std::uint64_t chunk_bytes,
                                      std::uint64_t total_bytes, unsigned in_flight) {
  io::file f = (co_await io::file::open(path, io::open_options::create_or_truncate())).value();
  const auto start = bench_clock::now();
  std::uint64_t cursor = 0;
  rt::scope writers;
  for (unsigned i = 0; i < in_flight; ++i) writers.spawn(file_writer(&f, data, chunk_bytes, total_bytes, &cursor));
  co_await writers.join();
  phases p;
  p.write_s = seconds_since(start);
  const auto sync_start = bench_clock::now();
  (co_await f.fsync()).value();
  p.fsync_s = seconds_since(sync_start);
  (co_await f.close()).value();
  co_return p;
}

phases pwrite_seconds(const std::string& path, const std::byte* data, std::uint64_t chunk_bytes,
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
  phases p;
  p.write_s = seconds_since(start);
  const auto sync_start = bench_clock::now();
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), fmt::format("fsync '{}'", path));
  }
  p.fsync_s = seconds_since(sync_start);
  ::close(fd);
  return p;
}

// Diagnostic (--variant raw-uring): the same writes through a raw liburing loop (its own ring, the
// same in-flight count, waiting for `wait_batch` completions per kernel entry), to tell the kernel's
// cost of io_uring file writes from sluice's.
phases raw_uring_seconds(const std::string& path, const std::byte* data, std::uint64_t chunk_bytes,
                         std::uint64_t total_bytes, unsigned in_flight, unsigned wait_batch) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), fmt::format("open '{}'", path));
  io_uring ring{};
  io_uring_params params{};
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  int rc = io_uring_queue_init_params(256, &ring, &params);
  if (rc == -EINVAL) {
    params = io_uring_params{};
    rc = io_uring_queue_init_params(256, &ring, &params);
  }
  if (rc < 0) {
    ::close(fd);
    throw std::system_error(-rc, std::generic_category(), "io_uring_queue_init");
  }
  const auto fail = [&](int err, const char* what) {
    io_uring_queue_exit(&ring);
    ::close(fd);
    throw std::system_error(err, std::generic_category(), fmt::format("{} '{}'", what, path));
  };
  const auto start = bench_clock::now();
  std::uint64_t next = 0;
  unsigned active = 0;
  while (next < total_bytes || active > 0) {
    while (next < total_bytes && active < in_flight) {
      const auto n = static_cast<unsigned>(std::min(chunk_bytes, total_bytes - next));
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_write(sqe, fd, data, n, next);
      io_uring_sqe_set_data64(sqe, n);
      next += n;
      ++active;
    }
    rc = io_uring_submit_and_wait(&ring, std::min(active, std::max(1u, wait_batch)));
    if (rc < 0 && rc != -EINTR) fail(-rc, "io_uring_submit_and_wait");
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring, head, cqe) {
      if (cqe->res != static_cast<int>(cqe->user_data)) fail(cqe->res < 0 ? -cqe->res : EIO, "write (short or failed)");
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    active -= seen;
  }
  phases p;
  p.write_s = seconds_since(start);
  const auto sync_start = bench_clock::now();
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_fsync(sqe, fd, 0);
  io_uring_cqe* cqe = nullptr;
  io_uring_submit(&ring);
  rc = io_uring_wait_cqe(&ring, &cqe);
  if (rc < 0) fail(-rc, "io_uring_wait_cqe");
  if (cqe->res < 0) fail(-cqe->res, "fsync");
  io_uring_cqe_seen(&ring, cqe);
  p.fsync_s = seconds_since(sync_start);
  io_uring_queue_exit(&ring);
  ::close(fd);
  return p;
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
        {"--variant",
         "sluice: io::file (the figure). Diagnostic: raw-uring (the same writes through a raw liburing loop)",
         &variant_},
        {"--wait-batch", "raw-uring: completions waited for per kernel entry", &wait_batch_},
    };
  }

  void run(const common_options& common, const reporter& out) override {
    if (bytes_ == 0 || chunk_bytes_ == 0 || in_flight_ == 0) {
      throw std::invalid_argument("--bytes, --chunk-bytes and --in-flight must be at least 1");
    }
    if (chunk_bytes_ > (1u << 30)) throw std::invalid_argument("--chunk-bytes must be at most 1 GiB");
    if (variant_ != "sluice" && variant_ != "raw-uring") throw std::invalid_argument("--variant must be sluice or raw-uring");
    const std::string dir = dir_.empty() ? default_dir() : dir_;
    if (!std::filesystem::is_directory(dir)) throw std::invalid_argument(fmt::format("--dir '{}' is not a directory", dir));

    std::vector<std::byte> data(chunk_bytes_);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
    const double total = static_cast<double>(bytes_);

    std::vector<double> write_s, fsync_s, base_write_s, base_fsync_s;
    auto r = measure_paired(
        common.runs,
        [&] {
          temp_file tmp(dir, "sluice");
          const phases p =
              variant_ == "sluice"
                  ? rt::sync_wait(sluice_write_seconds(tmp.path(), data.data(), chunk_bytes_, bytes_, in_flight_))
                  : raw_uring_seconds(tmp.path(), data.data(), chunk_bytes_, bytes_, in_flight_, wait_batch_);
          write_s.push_back(p.write_s);
          fsync_s.push_back(p.fsync_s);
          return total / p.total();
        },
        [&] {
          temp_file tmp(dir, "pwrite");
          const phases p = pwrite_seconds(tmp.path(), data.data(), chunk_bytes_, bytes_);
          base_write_s.push_back(p.write_s);
          base_fsync_s.push_back(p.fsync_s);
          return total / p.total();
        });
    const double ratio = r.figure / r.baseline;
    out.result(name(),
               fmt::format("file{}: {}/s  baseline (pwrite loop) {}/s  ratio {:.2f}  ({} in {} writes, {} in flight, "
                           "then fsync; {})  target >= 0.9: {}\n"
                           "  phases (median s): figure write {:.3f} + fsync {:.3f}; pwrite write {:.3f} + fsync {:.3f}",
                           variant_ == "sluice" ? "" : " (" + variant_ + ")", human_bytes(r.figure),
                           human_bytes(r.baseline), ratio, human_bytes(total),
                           human_bytes(static_cast<double>(chunk_bytes_)), in_flight_, dir,
                           ratio >= 0.9 ? "met" : "MISSED", median(write_s), median(fsync_s), median(base_write_s),
                           median(base_fsync_s)),
               {{"bytes_per_s", r.figure},
                {"baseline_bytes_per_s", r.baseline},
                {"ratio", ratio},
                {"bytes", bytes_},
                {"chunk_bytes", chunk_bytes_},
                {"in_flight", std::uint64_t{in_flight_}},
                {"dir", dir},
                {"write_phase_s", median(write_s)},
                {"fsync_phase_s", median(fsync_s)},
                {"baseline_write_phase_s", median(base_write_s)},
                {"baseline_fsync_phase_s", median(base_fsync_s)},
                {"variant", variant_},
                {"runs", std::uint64_t{common.runs}}});
  }

 private:
  std::uint64_t bytes_ = std::uint64_t{1} << 30;
  std::uint64_t chunk_bytes_ = 32 * 1024;
  unsigned in_flight_ = 16;
  std::string dir_;
  std::string variant_ = "sluice";
  unsigned wait_batch_ = 1;
};

registration<file_bench> reg;

}  // namespace
}  // namespace sluice::bench
