#include <sluice/io/file.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>
#include <support/fd_count.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::io;
using sluice::runtime::io_op;
using sluice::runtime::op_code;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::runtime::test_backend;
using sluice::test::backend_kind;
using sluice::test::temp_dir;

namespace {

std::vector<std::byte> pattern(std::size_t size, unsigned seed = 1) {
  std::vector<std::byte> bytes(size);
  unsigned x = seed;
  for (auto& b : bytes) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 16);
  }
  return bytes;
}

// Reads the whole file at `path` back.
task<std::vector<std::byte>> read_back(std::string path) {
  auto f = (co_await file::open(path, open_options::read_only())).value();
  const std::uint64_t size = (co_await f.size()).value();
  std::vector<std::byte> bytes(size);
  const std::size_t n = (co_await f.read_full(bytes, 0)).value();
  bytes.resize(n);
  (co_await f.close()).value();
  co_return bytes;
}

task<std::vector<std::byte>> write_then_read(std::string path, std::vector<std::byte> data) {
  auto f = (co_await file::open(path, open_options::create_or_truncate())).value();
  (co_await f.write_all(data, 0)).value();
  (co_await f.fdatasync()).value();
  (co_await f.fsync()).value();
  (co_await f.close()).value();
  co_return co_await read_back(path);
}

// Writes `data` with write_all to a new file, whose descriptor goes to *fd_out for fault rules.
task<result<void>> write_all_to_new_file(std::string path, std::vector<std::byte> data, int* fd_out) {
  auto f = (co_await file::open(path, open_options::create_or_truncate())).value();
  *fd_out = f.fd();
  co_return co_await f.write_all(data, 0);
}

// A fault rule for ops with `code` on the descriptor *fd (set once the file is open).
test_backend::fault_rule fail_on(op_code code, const int* fd, std::int32_t result) {
  return [code, fd, result](const io_op& op) -> std::optional<std::int32_t> {
    if (op.code == code && op.fd == *fd) return result;
    return std::nullopt;
  };
}

}  // namespace

TEST_CASE("bytes written to a file read back the same", "[file]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  const auto data = pattern(300'000);
  REQUIRE(sync_wait(write_then_read(dir.file("data"), data), sluice::test::backend_options(kind)) == data);
}

namespace {
task<std::vector<std::size_t>> read_at_edges(std::string path) {
  auto f = (co_await file::open(path, open_options{.read = true, .write = true, .create = true})).value();
  (co_await f.write_all(pattern(100), 0)).value();
  std::vector<std::byte> buf(64);
  std::vector<std::size_t> got;
  got.push_back((co_await f.read_at(buf, 90)).value());         // crosses the end: short read
  got.push_back((co_await f.read_at(buf, 100)).value());        // at the end: 0
  got.push_back((co_await f.read_full(buf, 70)).value());       // stops at EOF: 30
  got.push_back((co_await f.write_at(pattern(10), 100)).value());  // one plain write
  const std::uint64_t size = (co_await f.size()).value();
  got.push_back(size);
  co_return got;
}
}  // namespace

TEST_CASE("reads stop at end of file: read_at is short, then 0, read_full yields what exists", "[file]") {
  temp_dir dir;
  REQUIRE(sync_wait(read_at_edges(dir.file("f"))) == std::vector<std::size_t>{10, 0, 30, 10, 110});
}

namespace {
// Yields the byte count of each write.
task<std::vector<std::size_t>> write_16_in_flight(std::string path, std::vector<std::byte> block) {
  auto f = (co_await file::open(path, open_options::create_or_truncate())).value();
  std::vector<task<result<std::size_t>>> writes;
  for (std::uint64_t i = 0; i < 16; ++i) writes.push_back(f.write_at(block, i * block.size()));
  auto results = co_await sluice::runtime::when_all(std::move(writes));
  std::vector<std::size_t> written;
  for (auto& r : results) written.push_back(r.value());
  (co_await f.close()).value();
  co_return written;
}
}  // namespace

TEST_CASE("sixteen concurrent writes at different offsets all land", "[file]") {
  temp_dir dir;
  const auto block = pattern(32 * 1024, 7);
  REQUIRE(sync_wait(write_16_in_flight(dir.file("f"), block)) == std::vector<std::size_t>(16, block.size()));
  const auto all = sync_wait(read_back(dir.file("f")));
  REQUIRE(all.size() == 16 * block.size());
  for (std::size_t i = 0; i < 16; ++i) {
    REQUIRE(std::equal(block.begin(), block.end(), all.begin() + static_cast<std::ptrdiff_t>(i * block.size())));
  }
}

TEST_CASE("write_all loops over forced short writes and writes every byte", "[file][faults]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  int fd = -2;
  int writes = 0;
  backend->add_fault([&fd, &writes](const io_op& op) -> std::optional<std::int32_t> {
    if (op.code != op_code::write || op.fd != fd) return std::nullopt;
    ++writes;
    return 1000;  // every write stops after 1000 bytes
  });
  const auto data = pattern(25'500);
  REQUIRE(sync_wait(write_all_to_new_file(dir.file("short"), data, &fd), std::move(options)).ok());
  REQUIRE(writes == 26);
  REQUIRE(sync_wait(read_back(dir.file("short"))) == data);
}

TEST_CASE("a write that makes no progress is an error, not an endless loop", "[file][faults]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  int fd = -2;
  backend->add_fault(fail_on(op_code::write, &fd, 0));
  const auto r = sync_wait(write_all_to_new_file(dir.file("stuck"), pattern(10), &fd), std::move(options));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().code() == errc::no_progress);
  REQUIRE(r.error().message() == "write '" + dir.file("stuck") + "' at offset 0: no progress (0 bytes transferred)");
}

TEST_CASE("ENOSPC on a write yields an error naming the operation and the path", "[file][faults]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  int fd = -2;
  backend->add_fault(fail_on(op_code::write, &fd, -ENOSPC));
  const auto r = sync_wait(write_all_to_new_file(dir.file("full"), pattern(4096), &fd), std::move(options));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().code() == std::errc::no_space_on_device);
  REQUIRE(r.error().message() == "write '" + dir.file("full") + "': No space left on device");
}

namespace {
task<std::pair<result<void>, result<std::size_t>>> fsync_then_read(std::string path, int* fd) {
  auto f = (co_await file::open(path, open_options{.read = true, .write = true, .create = true})).value();
  *fd = f.fd();
  auto synced = co_await f.fsync();
  std::vector<std::byte> buf(16);
  auto read = co_await f.read_at(buf, 0);
  co_return std::pair{std::move(synced), std::move(read)};
}
}  // namespace

TEST_CASE("EIO on fsync and on read yields errors naming each operation and the path", "[file][faults]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  auto options = sluice::test::test_backend_options(backend);
  int fd = -2;
  backend->add_fault(fail_on(op_code::fsync, &fd, -EIO));
  backend->add_fault(fail_on(op_code::read, &fd, -EIO));
  const std::string path = dir.file("bad-disk");
  const auto [synced, read] = sync_wait(fsync_then_read(path, &fd), std::move(options));
  REQUIRE_FALSE(synced.ok());
  REQUIRE(synced.error().message() == "fsync '" + path + "': Input/output error");
  REQUIRE(synced.error().code() == std::errc::io_error);
  REQUIRE_FALSE(read.ok());
  REQUIRE(read.error().message() == "read '" + path + "': Input/output error");
  REQUIRE(read.error().code() == std::errc::io_error);
}

namespace {
task<result<file>> open_task(std::string path, open_options options) { co_return co_await file::open(path, options); }
}  // namespace

TEST_CASE("opening a missing file names the path and ENOENT", "[file]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  const std::string path = dir.file("chk-7/_manifest");
  const auto r = sync_wait(open_task(path, open_options::read_only()), sluice::test::backend_options(kind));
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().code() == std::errc::no_such_file_or_directory);
  REQUIRE(r.error().message() == "open '" + path + "': No such file or directory");
  REQUIRE_THROWS_WITH(sync_wait(open_task(path, open_options::read_only())).value(),
                      "open '" + path + "': No such file or directory");
}

TEST_CASE("create_new refuses a file that exists, and contradictory options are refused before any I/O", "[file]") {
  temp_dir dir;
  const std::string path = dir.file("once");
  REQUIRE(sync_wait(open_task(path, open_options::create_new())).ok());
  const auto again = sync_wait(open_task(path, open_options::create_new()));
  REQUIRE_FALSE(again.ok());
  REQUIRE(again.error().code() == std::errc::file_exists);
  REQUIRE(again.error().message() == "open '" + path + "': File exists");

  const auto neither = sync_wait(open_task(path, open_options{.read = false}));
  REQUIRE(neither.error().code() == std::errc::invalid_argument);
  REQUIRE(neither.error().message() == "open '" + path + "': invalid open_options: neither read nor write");
  REQUIRE(sync_wait(open_task(path, open_options{.truncate = true})).error().message() ==
          "open '" + path + "': invalid open_options: truncate needs write");
  REQUIRE(sync_wait(open_task(path, open_options{.write = true, .exclusive = true})).error().message() ==
          "open '" + path + "': invalid open_options: exclusive needs create");
}

TEST_CASE("append_only writes land at the end whatever the offset", "[file]") {
  temp_dir dir;
  const std::string path = dir.file("log");
  struct body {
    static task<void> run(std::string path) {
      for (int i = 0; i < 3; ++i) {
        auto f = (co_await file::open(path, open_options::append_only())).value();
        (co_await f.write_all(pattern(100, static_cast<unsigned>(i)), 0)).value();
      }
    }
  };
  sync_wait(body::run(path));
  auto expected = pattern(100, 0);
  for (unsigned i = 1; i < 3; ++i) {
    const auto more = pattern(100, i);
    expected.insert(expected.end(), more.begin(), more.end());
  }
  REQUIRE(sync_wait(read_back(path)) == expected);
}

namespace {
// The manifest protocol: write a temp file, fsync it, rename it into place, fsync the directory.
task<result<void>> publish(std::string dir, std::vector<std::byte> data) {
  const std::string tmp = dir + "/_manifest.tmp";
  auto f = (co_await file::open(tmp, open_options::create_new())).value();
  (co_await f.write_all(data, 0)).value();
  (co_await f.fsync()).value();
  (co_await f.close()).value();
  if (auto r = co_await rename(tmp, dir + "/_manifest"); !r) co_return r;
  co_return co_await fsync_directory(dir);
}
}  // namespace

TEST_CASE("rename then fsync_directory publishes a file under its final name", "[file]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  const auto data = pattern(5000);
  const auto fds_before = sluice::test::open_fd_count();
  REQUIRE(sync_wait(publish(dir.path(), data), sluice::test::backend_options(kind)).ok());
  REQUIRE(sluice::test::open_fd_count() == fds_before);  // the directory descriptor was closed
  REQUIRE(sync_wait(read_back(dir.file("_manifest"))) == data);
  REQUIRE(sync_wait(open_task(dir.file("_manifest.tmp"), {})).error().code() == std::errc::no_such_file_or_directory);
}

TEST_CASE("rename and fsync_directory name their paths when they fail", "[file]") {
  temp_dir dir;
  const std::string missing = dir.file("missing");
  const auto renamed = sync_wait(rename(missing, dir.file("b")));
  REQUIRE(renamed.error().message() == "rename '" + missing + "' to '" + dir.file("b") + "': No such file or directory");
  const auto synced = sync_wait(fsync_directory(missing));
  REQUIRE(synced.error().message() == "open directory '" + missing + "': No such file or directory");
}

namespace {
struct closed_use {
  result<std::size_t> write;
  result<std::size_t> read;
  result<void> write_all;
  result<void> fsync;
  result<void> close_again;
};
task<closed_use> use_after_close(std::string path) {
  auto f = (co_await file::open(path, open_options::create_or_truncate())).value();
  (co_await f.close()).value();
  std::vector<std::byte> buf(8);
  auto w = co_await f.write_at(pattern(8), 0);
  auto r = co_await f.read_at(buf, 0);
  auto wa = co_await f.write_all(pattern(8), 0);
  auto s = co_await f.fsync();
  auto c = co_await f.close();
  co_return closed_use{std::move(w), std::move(r), std::move(wa), std::move(s), std::move(c)};
}
}  // namespace

TEST_CASE("a closed file reports EBADF naming the path instead of crashing, and closes twice safely", "[file]") {
  temp_dir dir;
  const std::string path = dir.file("closed");
  const auto use = sync_wait(use_after_close(path));
  REQUIRE(use.write.error().code() == std::errc::bad_file_descriptor);
  REQUIRE(use.write.error().message() == "write '" + path + "': Bad file descriptor (already closed)");
  REQUIRE(use.read.error().message() == "read '" + path + "': Bad file descriptor (already closed)");
  REQUIRE(use.write_all.error().code() == std::errc::bad_file_descriptor);
  REQUIRE(use.fsync.error().message() == "fsync '" + path + "': Bad file descriptor (already closed)");
  REQUIRE(use.close_again.ok());
}

namespace {
// Opens files and drops or overwrites them while open; yields the descriptor count at each step.
task<std::vector<int>> drop_open_files(std::string dir) {
  std::vector<int> counts{sluice::test::open_fd_count()};
  {
    auto f = (co_await file::open(dir + "/a", open_options::create_or_truncate())).value();
    counts.push_back(sluice::test::open_fd_count());
  }
  counts.push_back(sluice::test::open_fd_count());  // destroyed while open
  auto g = (co_await file::open(dir + "/a", open_options::read_only())).value();
  g = (co_await file::open(dir + "/a", open_options::read_only())).value();  // the first one is closed
  counts.push_back(sluice::test::open_fd_count());
  file h = std::move(g);
  counts.push_back(g.is_open() ? -1 : sluice::test::open_fd_count());  // a move transfers the one descriptor
  co_return counts;
}
}  // namespace

TEST_CASE("a file destroyed or replaced while open closes its descriptor", "[file]") {
  temp_dir dir;
  const auto counts = sync_wait(drop_open_files(dir.path()));
  const int base = counts[0];
  REQUIRE(counts == std::vector<int>{base, base + 1, base, base + 1, base + 1});
}

namespace {
task<std::optional<file_status>> status_of(std::string path, bool write_first) {
  auto f = (co_await file::open(path, open_options{.read = true, .write = true, .create = write_first})).value();
  if (write_first) (co_await f.write_all(pattern(100), 0)).value();
  auto st = co_await f.status();
  (co_await f.close()).value();
  if (!st) co_return std::nullopt;
  co_return *st;
}

// Opens `path`, waits until its scope is stopped, then closes it (with the stop requested).
task<void> close_while_stopping(std::string path, bool* opened, bool* closed_ok) {
  auto f = (co_await file::open(path, open_options::create_or_truncate())).value();
  *opened = true;
  const std::stop_token token = co_await sluice::runtime::current_stop_token();
  for (int i = 0; i < 1000 && !token.stop_requested(); ++i) co_await sluice::runtime::yield();
  auto closed = co_await f.close();
  *closed_ok = closed.ok();
}

task<void> stop_then_close(std::string path, bool* closed_ok) {
  sluice::runtime::scope s;
  bool opened = false;
  s.spawn(close_while_stopping(path, &opened, closed_ok));
  for (int i = 0; i < 1000 && !opened; ++i) co_await sluice::runtime::yield();
  s.request_stop();
  co_await s.join();
}
}  // namespace

TEST_CASE("a file's size and type come from one statx through the ring", "[file]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));  // outlives the checks
  const auto st = ex.block_on(status_of(dir.file("data"), true));
  REQUIRE(st);
  CHECK(st->size_bytes == 100);
  CHECK(S_ISREG(st->mode));
  CHECK(backend->performed(op_code::statx) == 1);
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  const auto fifo = sync_wait(status_of(dir.file("fifo"), false));  // io_uring
  REQUIRE(fifo);
  CHECK(S_ISFIFO(fifo->mode));
}

TEST_CASE("a task that is stopping still closes its file through the ring", "[file]") {
  temp_dir dir;
  test_backend* backend = nullptr;
  bool closed_ok = false;
  sluice::runtime::executor ex(sluice::test::test_backend_options(backend));  // outlives the checks
  const int base = sluice::test::open_fd_count();
  ex.block_on(stop_then_close(dir.file("a"), &closed_ok));
  CHECK(closed_ok);
  CHECK(backend->performed(op_code::close) == 1);  // not a synchronous close on the executor
  CHECK(sluice::test::open_fd_count() == base);
}
