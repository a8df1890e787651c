#include <sluice/dataflow/stdout_sink.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

using sluice::dataflow::stdout_sink;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::test::backend_kind;
using sluice::test::temp_dir;

namespace {

task<std::uint64_t> write_lines(int fd, int count) {
  stdout_sink out(fd);
  for (int i = 0; i < count; ++i) {
    auto r = co_await out.write("line " + std::to_string(i));
    r.value();
  }
  auto closed = co_await out.close();
  closed.value();
  co_return out.lines_written();
}

task<sluice::io::result<void>> write_then_flush(int fd) {
  stdout_sink out(fd);
  auto w = co_await out.write("x");
  w.value();
  co_return co_await out.flush();
}

}  // namespace

TEST_CASE("stdout_sink writes each line with a newline at the descriptor's position", "[stdout_sink]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  temp_dir dir;
  const std::string path = dir.file("out");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "before\n", 7) == 7);  // the sink continues after what is there
  const int count = 10000;                   // several 64 KiB flushes
  CHECK(sync_wait(write_lines(fd, count), sluice::test::backend_options(kind)) == count);
  ::close(fd);
  std::string expected = "before\n";
  for (int i = 0; i < count; ++i) expected += "line " + std::to_string(i) + "\n";
  std::ifstream in(path, std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  CHECK(got.str() == expected);
}

TEST_CASE("stdout_sink reports a failed write naming the descriptor", "[stdout_sink]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  ::close(fds[1]);
  // Writing to the read end of a pipe fails with EBADF.
  auto r = sync_wait(write_then_flush(fds[0]));
  ::close(fds[0]);
  REQUIRE_FALSE(r);
  CHECK(r.error().message() == "write to descriptor " + std::to_string(fds[0]) + ": Bad file descriptor");
}
