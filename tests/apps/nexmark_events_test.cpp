// `sluice nexmark-events`: the generator's events as JSON lines, the same for the same options.

#include <support/temp_dir.hpp>

#include "run_sluice.hpp"

#include <sluice/nexmark/generator.hpp>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

using sluice::test::lines_of;
using sluice::test::run_sluice;

TEST_CASE("nexmark-events writes events first-event to first-event + events, one JSON line each", "[cli][nexmark]") {
  const sluice::test::temp_dir dir;
  const std::string out = dir.file("events.jsonl");
  const auto r = run_sluice({"nexmark-events", "--events", "120", "--first-event", "40", "--rate", "1000",
                             "--output", out});
  REQUIRE(r.exit_code == 0);
  const auto lines = lines_of(sluice::test::read_whole_file(out));
  REQUIRE(lines.size() == 120);
  sluice::nexmark::generator_config c;
  c.events_per_second = 1000;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i] == sluice::nexmark::to_json(sluice::nexmark::generate_event(c, 40 + i)));
  }
  // A second run over two halves gives the same lines: events depend on their number only.
  const std::string a = dir.file("a.jsonl"), b = dir.file("b.jsonl");
  REQUIRE(run_sluice({"nexmark-events", "--events", "70", "--first-event", "40", "--rate", "1000", "--output", a})
              .exit_code == 0);
  REQUIRE(run_sluice({"nexmark-events", "--events", "50", "--first-event", "110", "--rate", "1000", "--output", b})
              .exit_code == 0);
  CHECK(sluice::test::read_whole_file(a) + sluice::test::read_whole_file(b) == sluice::test::read_whole_file(out));
}

TEST_CASE("nexmark-events refuses a rate of 0 and an unwritable output, with exit codes 2 and 1", "[cli][nexmark]") {
  const sluice::test::temp_dir dir;
  const auto zero = run_sluice({"nexmark-events", "--events", "10", "--rate", "0", "--output", dir.file("x")});
  CHECK(zero.exit_code == 2);
  CHECK(zero.err.find("--rate") != std::string::npos);
  const auto nowhere = run_sluice({"nexmark-events", "--events", "10", "--output", dir.file("missing/dir/x")});
  CHECK(nowhere.exit_code == 1);
  CHECK(nowhere.err.find("missing/dir/x") != std::string::npos);
  const auto empty = run_sluice({"nexmark-events", "--events", "0", "--output", dir.file("empty")});
  CHECK(empty.exit_code == 0);
  CHECK(sluice::test::read_whole_file(dir.file("empty")).empty());
}

TEST_CASE("nexmark-events into a pipe or a device writes every event and exits 0 without an fsync", "[cli][nexmark]") {
  const sluice::test::temp_dir dir;
  const std::string fifo = dir.file("events.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string got;
  // The reader: the writer's open waits for it, then it reads to the end (the writer's close).
  std::thread reader([&fifo, &got] {
    const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[65536];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
  });
  const auto piped = run_sluice({"nexmark-events", "--events", "3000", "--rate", "1000", "--output", fifo});
  // Should the tool have ended without opening the pipe, this open ends the reader's wait.
  if (const int unblock = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC); unblock >= 0) ::close(unblock);
  reader.join();
  INFO(piped.err);
  CHECK(piped.exit_code == 0);
  const auto lines = lines_of(got);
  REQUIRE(lines.size() == 3000);  // more than one 256 KiB write, in order
  sluice::nexmark::generator_config c;
  c.events_per_second = 1000;
  CHECK(lines.front() == sluice::nexmark::to_json(sluice::nexmark::generate_event(c, 0)));
  CHECK(lines.back() == sluice::nexmark::to_json(sluice::nexmark::generate_event(c, 2999)));

  const auto device = run_sluice({"nexmark-events", "--events", "100", "--output", "/dev/null"});
  INFO(device.err);
  CHECK(device.exit_code == 0);
}
