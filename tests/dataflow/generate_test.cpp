// The job API's generated source, key partition stage, print sink and blocking map: every record once, in a job
// of any parallelism, across a restart, and at the rate asked for.
#include <sluice/dataflow/generate.hpp>
#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/runtime/fiber.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/backends.hpp>
#include <support/temp_dir.hpp>

#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

using namespace sluice::dataflow;
using sluice::snapshot::checkpoint_mode;
using sluice::test::published_lines;
using sluice::test::temp_dir;
namespace io = sluice::io;

namespace {

job_settings quick_settings(const temp_dir& dir) {
  job_settings settings;
  settings.checkpoint_dir = dir.file("checkpoints");
  settings.checkpoint_interval = std::chrono::milliseconds(20);
  settings.mode = checkpoint_mode::unaligned;
  settings.handle_signals = false;
  return settings;
}

std::vector<std::string> numbers(std::uint64_t count, std::uint64_t times) {
  std::vector<std::string> out;
  for (std::uint64_t n = 0; n < count; ++n) out.push_back(std::to_string(n * times));
  std::sort(out.begin(), out.end());
  return out;
}

void build(job_builder& job, const temp_dir& dir, std::size_t parallelism, std::uint64_t count, double rate = 0) {
  job.generate<std::uint64_t>("gen", parallelism, count, [](std::uint64_t n) { return n; }, rate)
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("triple", 3)
      .map<std::uint64_t>([](const std::uint64_t& n) { return 3 * n; })
      .write_lines(dir.file("out"), [](const std::uint64_t& n) { return std::to_string(n); });
}

}  // namespace

TEST_CASE("a generated source makes every record once, whatever its parallelism", "[dataflow][generate]") {
  const std::size_t parallelism = GENERATE(1, 2, 3);
  temp_dir dir;
  job_builder job("gen");
  build(job, dir, parallelism, 10'000);
  const job_result r = run_job(job, quick_settings(dir));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == numbers(10'000, 3));
}

TEST_CASE("a stopped generated job resumes where its checkpoint left it: every record once", "[dataflow][generate]") {
  temp_dir dir;
  {
    job_builder job("gen");
    build(job, dir, 2, 400'000);
    job_settings settings = quick_settings(dir);
    std::stop_source stop;
    settings.stop = stop.get_token();
    settings.on_checkpoint = [&stop](const sluice::snapshot::checkpoint_stats& c) {
      if (c.outcome.completed() && c.id >= 3) stop.request_stop();
    };
    const job_result first = run_job(job, settings);
    INFO(first.message);
    REQUIRE(first.exit_code == 130);
    CHECK(first.message == "stopped by request");
  }
  job_builder job("gen");
  build(job, dir, 2, 400'000);
  const job_result second = run_job(job, quick_settings(dir));
  INFO(second.message);
  REQUIRE(second.exit_code == 0);
  REQUIRE(second.resumed_from);
  CHECK(*second.resumed_from >= 3);
  CHECK(published_lines(dir.file("out")) == numbers(400'000, 3));
}

TEST_CASE("a rate-limited generated source keeps to its rate", "[dataflow][generate]") {
  temp_dir dir;
  job_builder job("gen");
  build(job, dir, 2, 300, 1000.0);  // 300 records at 1000/s: at least 0.3 s
  const auto start = std::chrono::steady_clock::now();
  const job_result r = run_job(job, quick_settings(dir));
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(r.exit_code == 0);
  CHECK(took >= std::chrono::milliseconds(250));  // a lower bound only: never a speed goal
  CHECK(published_lines(dir.file("out")) == numbers(300, 3));
}

TEST_CASE("print writes every line to its descriptor", "[dataflow][generate]") {
  temp_dir dir;
  const int fd = ::open(dir.file("printed.txt").c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_APPEND, 0644);
  REQUIRE(fd >= 0);
  job_builder job("print");
  job.generate<std::uint64_t>("gen", 2, 1000, [](std::uint64_t n) { return n; })
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("print", 2)
      .print([](const std::uint64_t& n) { return "n=" + std::to_string(n); }, fd);
  const job_result r = run_job(job, quick_settings(dir));
  ::close(fd);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(dir.file("printed.txt"));
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  std::vector<std::string> expected;
  for (int n = 0; n < 1000; ++n) expected.push_back("n=" + std::to_string(n));
  std::sort(expected.begin(), expected.end());
  CHECK(lines == expected);
}

TEST_CASE("a blocking map awaits on its fiber and the job's output is exact", "[dataflow][fiber]") {
  temp_dir dir;
  // Counted on the tasks' threads, asserted here: Catch2 stays on the test's thread.
  std::atomic<int> calls{0};
  std::atomic<int> off_fiber{0};
  job_builder job("blocking");
  job.generate<std::uint64_t>("gen", 2, 3000, [](std::uint64_t n) { return n; })
      .key_by<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .partition("lookup", 2)
      .map_blocking<std::uint64_t>([&calls, &off_fiber](const std::uint64_t& n) {
        // Blocking style: a "lookup" that takes a while, awaited on the task's fiber.
        ++calls;
        if (!sluice::runtime::in_fiber()) ++off_fiber;
        if (n % 100 == 0) {
          const bool slept = sluice::runtime::await(sluice::runtime::sleep_for(std::chrono::milliseconds(1)));
          if (!slept) throw std::runtime_error("stopped");
        }
        return 3 * n;
      })
      .write_lines(dir.file("out"), [](const std::uint64_t& n) { return std::to_string(n); });
  const job_result r = run_job(job, quick_settings(dir));
  INFO(r.message);
  REQUIRE(r.exit_code == 0);
  CHECK(published_lines(dir.file("out")) == numbers(3000, 3));
  CHECK(calls >= 3000);  // a record replayed after a restart is mapped again
  CHECK(off_fiber == 0);
}

TEST_CASE("a blocking map in a source stage is refused with the stage named", "[dataflow][fiber]") {
  temp_dir dir;
  job_builder job("blocking");
  job.generate<std::uint64_t>("gen", 1, 10, [](std::uint64_t n) { return n; })
      .map_blocking<std::uint64_t>([](const std::uint64_t& n) { return n; })
      .write_lines(dir.file("out"), [](const std::uint64_t& n) { return std::to_string(n); });
  CHECK_THROWS_WITH(run_job(job, quick_settings(dir)), Catch::Contains("'gen'") && Catch::Contains("blocking"));
}

TEST_CASE("an aligned-timeout barrier stuck behind a full output overtakes it after the timeout", "[dataflow][generate]") {
  // source -> map -> slow sink (1 ms a record): every buffer between them stays full, so each
  // source's in-band barrier is still queued when the 2 ms alignment timeout passes.
  temp_dir dir;
  job_builder job("switch");
  const auto key = [](const std::uint64_t& n) { return n; };
  job.generate<std::uint64_t>("gen", 2, 0, [](std::uint64_t n) { return n; })
      .key_by<std::uint64_t>(key)
      .partition("map", 2)
      .map<std::uint64_t>([](const std::uint64_t& n) { return n + 1; })
      .key_by<std::uint64_t>(key)
      .partition("sink", 2)
      .write_lines(dir.file("out"), [](const std::uint64_t& n) { return std::to_string(n); },
                   sink_options{std::chrono::microseconds(1000)});
  job_settings settings = quick_settings(dir);
  settings.mode = checkpoint_mode::aligned_timeout;
  settings.alignment_timeout = std::chrono::milliseconds(2);
  std::stop_source stop;
  settings.stop = stop.get_token();
  std::vector<std::uint64_t> channel_state;  // of each completed checkpoint (callbacks run on one executor)
  settings.on_checkpoint = [&](const sluice::snapshot::checkpoint_stats& c) {
    if (!c.outcome.completed()) return;
    channel_state.push_back(c.channel_state_bytes);
    if (channel_state.size() >= 4) stop.request_stop();
  };
  const job_result r = run_job(job, settings);
  INFO(r.message);
  REQUIRE(r.exit_code == 130);
  REQUIRE(channel_state.size() >= 4);
  // Once the buffers are full (after the first checkpoint or two), the barriers overtook them: the
  // sources' own state files (tasks 0 and 1) hold output channel state, which only the output-side
  // switch writes (a source has no input to time out on).
  CHECK(*std::max_element(channel_state.begin(), channel_state.end()) > 0);
  long long source_channel_bytes = 0;
  for (const auto& chk : std::filesystem::directory_iterator(dir.file("checkpoints"))) {
    std::ifstream manifest(chk.path() / "_manifest");
    std::string word;
    while (manifest >> word) {
      if (word != "file") continue;
      std::string name, size, crc, op, ch;
      manifest >> name >> size >> crc >> op >> ch;
      if (name == "task-0.state" || name == "task-1.state") source_channel_bytes += std::stoll(ch);
    }
  }
  CHECK(source_channel_bytes > 0);
}

TEST_CASE("a timed generated source sends watermarks, so windows fire before its input ends", "[dataflow][generate]") {
  // No end (count 0): without watermarks no window would ever fire and nothing would be published.
  const temp_dir dir;
  job_builder job("timed");
  job.generate_timed<std::uint64_t>(
         "gen", 2, 0, [](std::uint64_t n) { return n; }, [](std::uint64_t n) { return n / 10; })
      .key_by<std::uint64_t>([](const std::uint64_t&) { return std::uint64_t{0}; })
      .window<std::uint64_t, std::string>(
          "count", 1, 100, [](const std::uint64_t& n) { return n / 10; },
          [](std::uint64_t& acc, const std::uint64_t&) { ++acc; },
          [](std::uint64_t start, const std::uint64_t&, const std::uint64_t& acc) {
            return std::to_string(start) + " " + std::to_string(acc);
          })
      .write_lines(dir.file("out"), [](const std::string& s) { return s; });
  std::stop_source drain;
  job_settings settings = quick_settings(dir);
  settings.drain = drain.get_token();
  std::atomic<bool> published{false};
  std::thread watcher([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline && published_lines(dir.file("out")).size() < 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    published = published_lines(dir.file("out")).size() >= 3;
    drain.request_stop();
  });
  const job_result r = run_job(job, settings);
  watcher.join();
  CHECK(r.exit_code == 0);
  CHECK(published);
  // Every published window is complete: events 1000 k .. 1000 k + 999 have times 100 k .. 100 k + 99.
  for (const std::string& line : published_lines(dir.file("out"))) {
    const auto space = line.find(' ');
    REQUIRE(space != std::string::npos);
    CHECK(std::stoull(line.substr(0, space)) % 100 == 0);
    CHECK(line.substr(space + 1) == "1000");
  }
}

namespace {

struct counting final : collector<std::uint64_t> {
  std::vector<std::uint64_t> got;
  void collect(const std::uint64_t& r) override { got.push_back(r); }
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};

// A rate-limited generator never sleeps inside read(): not due yet, it says idle, and the task
// waits for wait_readable() together with its barriers (a sleep in read() held a barrier).
sluice::runtime::task<void> idle_until_due(std::vector<read_status>* statuses, std::vector<std::uint64_t>* got,
                                           std::vector<long>* at_ms) {
  generator_source<std::uint64_t> source(0, 1, 0, 10.0, [](std::uint64_t n) { return n; });
  counting down;
  source_output<std::uint64_t> out(down);
  io::result<void> opened = co_await source.open();
  REQUIRE(opened.ok());
  const auto start = sluice::runtime::executor::current()->now();
  for (int i = 0; i < 3; ++i) {
    io::result<read_status> r = co_await source.read(out, 100);
    REQUIRE(r.ok());
    statuses->push_back(r.value());
    if (r.value() == read_status::idle) co_await source.wait_readable();
    at_ms->push_back(static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           sluice::runtime::executor::current()->now() - start)
                                           .count()));
  }
  *got = down.got;
}

}  // namespace

TEST_CASE("a rate-limited generator says idle until its next record is due, and wait_readable waits for that",
          "[dataflow][generate]") {
  std::vector<read_status> statuses;
  std::vector<std::uint64_t> got;
  std::vector<long> at_ms;
  sluice::runtime::sync_wait(idle_until_due(&statuses, &got, &at_ms), sluice::test::virtual_time());
  // 10 records/s: none at 0 ms, the first due at 100 ms.
  CHECK(statuses == std::vector<read_status>{read_status::idle, read_status::more, read_status::idle});
  CHECK(got == std::vector<std::uint64_t>{0});
  CHECK(at_ms == std::vector<long>{100, 100, 200});
}
