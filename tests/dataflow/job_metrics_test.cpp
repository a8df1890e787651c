// job_settings::metrics_address: the word count serves /metrics while it runs, scraped here with a
// plain socket client from the test's thread; the text is checked with `promtool check metrics`
// (Debian's prometheus package) when it is installed.

#include <sluice/dataflow/job_runner.hpp>
#include <sluice/dataflow/samples.hpp>

#include <support/http_client.hpp>
#include <support/temp_dir.hpp>

#include "join_support.hpp"
#include "wordcount_support.hpp"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>

using namespace sluice::dataflow;
using namespace std::chrono_literals;
using sluice::test::http_client;
using sluice::test::http_get;
using sluice::test::http_reply;
using sluice::test::temp_dir;
using sluice::test::write_corpus_file;
namespace ss = sluice::snapshot;

namespace {

// The value of the series written exactly as `series` ("name{labels}"), if present.
std::optional<double> value_of(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

// promtool's verdict on `text`: exit code and output; nullopt without promtool.
std::optional<std::pair<int, std::string>> promtool_check(const temp_dir& dir, const std::string& text) {
  if (::access("/usr/bin/promtool", X_OK) != 0) return std::nullopt;
  const std::string file = dir.file("scrape.txt");
  std::ofstream(file) << text;
  FILE* p = ::popen(("/usr/bin/promtool check metrics < " + file + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  return std::pair{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A word count with metrics on an ephemeral port, run on a thread of its own.
struct metered_wordcount {
  temp_dir dir;
  std::unique_ptr<job_builder> built;
  job_builder& job;
  job_settings settings;
  std::promise<std::uint16_t> port_promise;
  std::atomic<int> completed{0};
  std::stop_source stop;
  std::thread thread;
  job_result result;

  static std::unique_ptr<job_builder> wordcount(const temp_dir& dir) {
    auto j = std::make_unique<job_builder>("wordcount");
    build_wordcount(*j, {dir.file("input.txt"), dir.file("out"), 2, 0});
    return j;
  }
  explicit metered_wordcount(std::uint64_t lines) : built(wordcount(dir)), job(*built) {
    write_corpus_file(dir.file("input.txt"), lines, 11);
    settings.checkpoint_dir = dir.file("chk");
    settings.checkpoint_interval = 20ms;
    settings.handle_signals = false;
    settings.metrics_address = "127.0.0.1:0";
    settings.on_metrics_listening = [this](std::uint16_t port) { port_promise.set_value(port); };
    settings.on_checkpoint = [this](const ss::checkpoint_stats& s) {
      if (s.outcome.completed()) ++completed;
    };
    settings.stop = stop.get_token();
  }
  void start() {
    thread = std::thread([this] { result = run_job(job, settings); });
  }
  ~metered_wordcount() {
    stop.request_stop();
    if (thread.joinable()) thread.join();
  }
};

}  // namespace

TEST_CASE("a running job serves its metrics at /metrics by Prometheus conventions, in a text promtool accepts") {
  metered_wordcount w(3'000'000);
  std::future<std::uint16_t> port_future = w.port_promise.get_future();
  w.start();
  REQUIRE(port_future.wait_for(60s) == std::future_status::ready);
  const std::uint16_t port = port_future.get();
  REQUIRE(port != 0);
  // Once a checkpoint completed (on_checkpoint runs before the metrics hear of it only by a few
  // instructions on the same executor, so the scrape, which runs there too, sees it).
  for (int i = 0; i < 3000 && w.completed.load() == 0; ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(w.completed.load() >= 1);

  // The readers pass their words on through the combiner, at checkpoints: one that had read nothing
  // yet when the first completed (a loaded machine) sends its first pairs at a later one.
  const std::string job = "sluice_job=\"wordcount\"";
  const auto both_readers_sent = [&job](const std::string& text) {
    for (const char* task : {"read#0", "read#1"}) {
      const std::string l = "{" + job + ",task=\"" + task + "\"}";
      if (value_of(text, "sluice_task_records_out_total" + l).value_or(0) == 0) return false;
    }
    return true;
  };
  std::optional<http_reply> r = http_get(port, "/metrics");
  for (int i = 0; i < 3000 && r && !both_readers_sent(r->body); ++i) {
    std::this_thread::sleep_for(5ms);
    r = http_get(port, "/metrics");
  }
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = r->body;
  INFO(text);
  for (const char* task : {"count#0", "count#1"}) {
    const std::string l = "{" + job + ",task=\"" + task + "\"}";
    CHECK(value_of(text, "sluice_task_records_in_total" + l).value_or(0) > 0);
    CHECK(value_of(text, "sluice_task_bytes_in_total" + l).value_or(0) > 0);
    CHECK(value_of(text, "sluice_task_credits_outstanding" + l).has_value());
    // The counts take the readers' pairs only at checkpoints: between them they wait for input.
    CHECK(value_of(text, "sluice_task_idle_seconds_total" + l).value_or(0) > 0);
  }
  for (const char* task : {"read#0", "read#1"}) {
    const std::string l = "{" + job + ",task=\"" + task + "\"}";
    CHECK(value_of(text, "sluice_task_records_out_total" + l).value_or(0) > 0);
    CHECK(value_of(text, "sluice_task_bytes_out_total" + l).value_or(0) > 0);
    CHECK(value_of(text, "sluice_task_backpressured_seconds_total" + l).value_or(-1) >= 0);
    CHECK(value_of(text, "sluice_task_idle_seconds_total" + l).value_or(-1) >= 0);
    CHECK(value_of(text, "sluice_task_buffers_in_use{" + job + ",task=\"" + task + "\",pool=\"output\"}").has_value());
  }
  CHECK(value_of(text, "sluice_checkpoints_completed_total{" + job + "}").value_or(0) >= 1);
  CHECK(value_of(text, "sluice_checkpoints_aborted_total{" + job + ",reason=\"expired\"}").has_value());
  CHECK(value_of(text, "sluice_checkpoint_duration_seconds_count{" + job + "}").value_or(0) >= 1);
  CHECK(value_of(text, "sluice_checkpoint_duration_seconds_bucket{" + job + ",le=\"+Inf\"}").value_or(0) >= 1);
  CHECK(value_of(text, "sluice_checkpoint_alignment_seconds_count{" + job + "}").value_or(0) >= 1);
  CHECK(value_of(text, "sluice_checkpoint_last_state_bytes{" + job + ",kind=\"operator\"}").value_or(0) > 0);
  CHECK(value_of(text, "sluice_job_resumed{" + job + "}") == 0.0);
  CHECK(value_of(text, "sluice_job_resumed_from_checkpoint{" + job + "}") == 0.0);
  CHECK(value_of(text, "sluice_build_info{" + job + ",version=\"" + SLUICE_PROJECT_VERSION + "\"}") == 1.0);
  for (const char* e : {"0", "1"}) {
    const std::string l = "{" + job + ",executor=\"" + e + "\"}";
    const double busy = value_of(text, "sluice_executor_busy_ratio" + l).value_or(-1);
    CHECK(busy >= 0);
    CHECK(busy <= 1);
    CHECK(value_of(text, "sluice_executor_submissions_total" + l).value_or(0) > 0);
    CHECK(value_of(text, "sluice_executor_operations_in_flight" + l).value_or(0) >= 1);  // the wake-up read
    CHECK(value_of(text, "sluice_executor_inbox_depth" + l).has_value());
    CHECK(value_of(text, "sluice_executor_network_buffers" + l).value_or(0) > 0);
    CHECK(value_of(text, "sluice_executor_network_buffers_in_use" + l).has_value());
  }

  // Prometheus' conventions: no "job" or "instance" label of our own (they are the scraper's target
  // labels: a series' own would be renamed exported_job), and the standard process_* series.
  CHECK(text.find("{job=") == std::string::npos);
  CHECK(text.find(",job=") == std::string::npos);
  CHECK(text.find("instance=") == std::string::npos);
  CHECK(value_of(text, "process_resident_memory_bytes").value_or(0) > 1e6);
  CHECK(value_of(text, "process_virtual_memory_bytes").value_or(0) >= value_of(text, "process_resident_memory_bytes").value_or(0));
  CHECK(value_of(text, "process_cpu_seconds_total").value_or(-1) >= 0);
  CHECK(value_of(text, "process_open_fds").value_or(0) >= 3);
  const double started = value_of(text, "process_start_time_seconds").value_or(0);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(started > now - 24 * 3600.0);  // this test process started within the day
  CHECK(started <= now + 1);

  // Other paths and methods, on one kept-alive connection.
  http_client c(port);
  REQUIRE(c.send("GET /nope HTTP/1.1\r\nHost: x\r\n\r\nPOST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
  std::optional<http_reply> root = c.read_reply();
  REQUIRE(root);
  CHECK(root->status == 404);
  std::optional<http_reply> post = c.read_reply();
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->header("allow") == "GET, HEAD");

  // A second scrape: counters never go back.
  std::optional<http_reply> again = http_get(port, "/metrics");
  REQUIRE(again);
  const std::string l = "{" + job + ",task=\"count#0\"}";
  CHECK(value_of(again->body, "sluice_task_records_in_total" + l).value_or(0) >=
        value_of(text, "sluice_task_records_in_total" + l).value_or(0));

  if (auto verdict = promtool_check(w.dir, text)) {
    INFO(verdict->second);
    CHECK(verdict->first == 0);
  } else {
    WARN("promtool check skipped: /usr/bin/promtool is not installed (Debian package prometheus)");
  }

  w.stop.request_stop();
  w.thread.join();
  CHECK((w.result.exit_code == 130 || w.result.exit_code == 0));
  // The endpoint went with the job.
  http_client after(port);
  CHECK_FALSE(after.connected());
}

TEST_CASE("a run that resumed from a checkpoint says which in its metrics") {
  metered_wordcount w(3'000'000);
  w.start();
  for (int i = 0; i < 3000 && w.completed.load() == 0; ++i) std::this_thread::sleep_for(5ms);
  REQUIRE(w.completed.load() >= 1);
  w.stop.request_stop();
  w.thread.join();
  REQUIRE(w.result.exit_code == 130);  // stopped: the next run resumes

  // The same job again over the same directories.
  job_builder again("wordcount");
  build_wordcount(again, {w.dir.file("input.txt"), w.dir.file("out"), 2, 0});
  std::promise<std::uint16_t> port_promise;
  std::future<std::uint16_t> port_future = port_promise.get_future();
  std::stop_source stop;
  job_settings s = w.settings;
  s.on_metrics_listening = [&port_promise](std::uint16_t port) { port_promise.set_value(port); };
  s.on_checkpoint = nullptr;
  s.stop = stop.get_token();
  job_result second;
  std::thread t([&] { second = run_job(again, s); });
  REQUIRE(port_future.wait_for(60s) == std::future_status::ready);
  std::optional<http_reply> r = http_get(port_future.get(), "/metrics");
  stop.request_stop();
  t.join();
  REQUIRE(r);
  REQUIRE(second.resumed_from.has_value());
  CHECK(value_of(r->body, "sluice_job_resumed{sluice_job=\"wordcount\"}") == 1.0);
  CHECK(value_of(r->body, "sluice_job_resumed_from_checkpoint{sluice_job=\"wordcount\"}") ==
        static_cast<double>(*second.resumed_from));
}

TEST_CASE("a backpressured join shows its sources' backpressure and its tasks' watermarks") {
  temp_dir dir;
  sluice::test::write_join_file(dir.file("left.csv"), 20'000, 50, 10'000, 1, "L");
  sluice::test::write_join_file(dir.file("right.csv"), 20'000, 50, 10'000, 2, "R");
  job_builder job("join");
  build_join(job, {dir.file("left.csv"), dir.file("right.csv"), dir.file("out"), 2, 1000, 200us});
  job_settings s;
  s.checkpoint_dir = dir.file("chk");
  s.checkpoint_interval = 50ms;
  s.mode = ss::checkpoint_mode::unaligned;
  s.handle_signals = false;
  s.metrics_address = "127.0.0.1:0";
  std::promise<std::uint16_t> port_promise;
  std::future<std::uint16_t> port_future = port_promise.get_future();
  s.on_metrics_listening = [&port_promise](std::uint16_t port) { port_promise.set_value(port); };
  std::stop_source stop;
  s.stop = stop.get_token();
  job_result result;
  std::thread t([&] { result = run_job(job, s); });
  REQUIRE(port_future.wait_for(60s) == std::future_status::ready);
  const std::uint16_t port = port_future.get();
  // Until the sources have waited for the slow join a while and a watermark reached it.
  std::string text;
  const std::string join0 = "{sluice_job=\"join\",task=\"join#0\"}";
  const std::string left0 = "{sluice_job=\"join\",task=\"left#0\"}";
  for (int i = 0; i < 500; ++i) {
    std::optional<http_reply> r = http_get(port, "/metrics");
    if (r && r->status == 200) text = r->body;
    if (value_of(text, "sluice_task_watermark_seconds" + join0).has_value() &&
        value_of(text, "sluice_task_backpressured_seconds_total" + left0).value_or(0) > 0.05) {
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  stop.request_stop();
  t.join();
  INFO(text);
  CHECK(value_of(text, "sluice_task_watermark_seconds" + join0).value_or(-1) >= 0);
  CHECK(value_of(text, "sluice_task_backpressured_seconds_total" + left0).value_or(0) > 0.05);
  CHECK(value_of(text, "sluice_task_records_in_total" + join0).value_or(0) > 0);
}

TEST_CASE("a metrics address that cannot be bound refuses the job with exit code 2, naming it") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));

  metered_wordcount w(100);
  w.settings.metrics_address = taken;
  const job_result r = run_job(w.job, w.settings);
  ::close(fd);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains("metrics endpoint: listen on " + taken) &&
                            Catch::Contains("Address already in use"));
  CHECK(sluice::test::published_lines(w.dir.file("out")).empty());  // nothing ran
}

TEST_CASE("a metrics address that does not parse is refused before the job starts") {
  metered_wordcount w(10);
  for (const char* bad : {"nonsense", "127.0.0.1", "example.com:80", "unix:/tmp/m.sock", "127.0.0.1:99999"}) {
    w.settings.metrics_address = bad;
    INFO(bad);
    CHECK_THROWS_WITH(run_job(w.job, w.settings), Catch::Contains("metrics address '" + std::string(bad) + "'"));
  }
}
