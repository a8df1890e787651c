// `sluice wordcount ... --metrics HOST:PORT`: the tool, run as a process, serves /metrics while the
// job runs (scraped with a plain socket client), and refuses an address it cannot use (exit 2).

#include "cluster_support.hpp"

#include <support/http_client.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using sluice::test::free_port;
using sluice::test::http_get;
using sluice::test::http_reply;
using sluice::test::run_sluice;
using sluice::test::temp_dir;
using sluice::test::tool_process;
using sluice::test::tool_run;

TEST_CASE("sluice wordcount --metrics serves /metrics while the job runs", "[cli]") {
  temp_dir dir;
  REQUIRE(run_sluice({"corpus", "--lines", "2000000", "--seed", "3", "--output", dir.file("in.txt")}).exit_code == 0);
  const unsigned port = free_port();
  const std::string at = "127.0.0.1:" + std::to_string(port);
  tool_process job({"wordcount", "--input", dir.file("in.txt"), "--output", dir.file("out"), "--checkpoint-dir",
                    dir.file("chk"), "--checkpoint-interval-ms", "20", "--quiet", "--metrics", at,
                    "--slow-sink-us", "20000"},
                   dir.file("log.txt"));
  // Scrape until a checkpoint has completed. (Counting 2 million lines takes a fraction of a second
  // with the combiner; the sinks' 100 lines at 20 ms each keep the job running a second longer.)
  std::optional<http_reply> r;
  bool checkpointed = false;
  for (int i = 0; i < 1000 && !checkpointed && job.running(); ++i) {
    r = http_get(static_cast<std::uint16_t>(port), "/metrics");
    checkpointed = r && r->status == 200 &&
                   r->body.find("sluice_checkpoints_completed_total{sluice_job=\"wordcount\"} 0\n") == std::string::npos;
    if (!checkpointed) std::this_thread::sleep_for(10ms);
  }
  INFO(job.log());
  REQUIRE(checkpointed);
  CHECK(r->header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r->body.find("# TYPE sluice_task_records_in_total counter\n") != std::string::npos);
  CHECK(r->body.find("sluice_task_records_in_total{sluice_job=\"wordcount\",task=\"count#0\"} ") != std::string::npos);
  CHECK(r->body.find("sluice_executor_busy_ratio{sluice_job=\"wordcount\",executor=\"1\"} ") != std::string::npos);
  CHECK(http_get(static_cast<std::uint16_t>(port), "/nothing-here")->status == 404);
  job.kill(SIGTERM);
  const std::optional<int> code = job.wait(60s);
  REQUIRE(code);
  CHECK((*code == 130 || *code == 0));
  CHECK_THAT(job.log(), Catch::Contains("sluice wordcount: status page on http://" + at + "/, metrics on http://" + at +
                                             "/metrics"));
}

TEST_CASE("sluice wordcount --metrics on a port in use, or a bad address, exits 2 naming it", "[cli]") {
  temp_dir dir;
  REQUIRE(run_sluice({"corpus", "--lines", "10", "--output", dir.file("in.txt")}).exit_code == 0);
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
  const tool_run in_use = run_sluice({"wordcount", "--input", dir.file("in.txt"), "--output", dir.file("out"),
                                      "--checkpoint-dir", dir.file("chk"), "--quiet", "--metrics", taken});
  ::close(fd);
  CHECK(in_use.exit_code == 2);
  CHECK_THAT(in_use.err, Catch::Contains("metrics endpoint: listen on " + taken + ": Address already in use"));
  const tool_run bad = run_sluice({"wordcount", "--input", dir.file("in.txt"), "--output", dir.file("out2"),
                                   "--checkpoint-dir", dir.file("chk2"), "--quiet", "--metrics", "localhost"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("metrics address 'localhost'"));
}
