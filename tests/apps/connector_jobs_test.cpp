// The sample jobs on connectors (issue 16), as a user runs them: `sluice wordcount --input
// nats://... --output postgresql://...` and so on, against real servers the tests start, SIGKILLed
// at random moments and restarted until done; the result is compared with an independent count.
// GCC 12 reports a false -Wstringop-overflow inside std::string copies inlined at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#include "cluster_support.hpp"
#include "run_sluice.hpp"
#include "stream_support.hpp"

#include <sluice/runtime/sync_wait.hpp>

#include <kafka/mock_cluster.hpp>
#include <support/nats_server.hpp>
#include <support/postgres_server.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <libpq-fe.h>

#include <atomic>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace sluice;
using namespace sluice::test;
using namespace std::chrono_literals;
using runtime::task;

namespace {

// Lines of words from a vocabulary of `words`, and their independent count ("word count" lines).
struct corpus {
  std::vector<std::string> lines;
  std::map<std::string, std::uint64_t> counts;
  // "window_start word count" lines for tumbling windows of `window` lines.
  std::vector<std::string> window_lines(std::size_t window) const {
    std::map<std::pair<std::size_t, std::string>, std::uint64_t> n;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      std::istringstream in(lines[i]);
      for (std::string w; in >> w;) ++n[{i / window * window, w}];
    }
    std::vector<std::string> out;
    for (const auto& [k, v] : n) out.push_back(std::to_string(k.first) + " " + k.second + " " + std::to_string(v));
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<std::string> count_lines() const {
    std::vector<std::string> out;
    for (const auto& [w, n] : counts) out.push_back(w + " " + std::to_string(n));
    std::sort(out.begin(), out.end());
    return out;
  }
};

corpus make_corpus(std::size_t lines, std::size_t words, std::uint32_t seed) {
  corpus c;
  std::mt19937 random(seed);
  for (std::size_t i = 0; i < lines; ++i) {
    std::string line;
    const std::size_t n = 1 + random() % 8;
    for (std::size_t k = 0; k < n; ++k) {
      if (k > 0) line += (random() % 5 == 0) ? "\t " : " ";
      line += "w" + std::to_string(random() % words);
    }
    c.lines.push_back(line);
  }
  for (const std::string& line : c.lines) {
    std::istringstream in(line);
    for (std::string w; in >> w;) ++c.counts[w];
  }
  return c;
}

// The table's rows as lines of its columns (space-separated), sorted.
std::vector<std::string> table_lines(const postgres_server& pg, const std::string& table,
                                     const std::string& columns = "word, count") {
  PGconn* c = PQconnectdb(pg.conninfo().c_str());
  REQUIRE(PQstatus(c) == CONNECTION_OK);
  PGresult* r = PQexec(c, ("SELECT " + columns + " FROM " + table).c_str());
  std::vector<std::string> out;
  if (PQresultStatus(r) == PGRES_TUPLES_OK) {
    for (int i = 0; i < PQntuples(r); ++i) {
      std::string line;
      for (int f = 0; f < PQnfields(r); ++f) line += (f > 0 ? " " : "") + std::string(PQgetvalue(r, i, f));
      out.push_back(line);
    }
  } else {
    out.push_back(std::string("query failed: ") + PQerrorMessage(c));
  }
  PQclear(r);
  PQfinish(c);
  return sorted(out);
}

std::vector<std::string> job_args(const std::string& input, const std::string& output, const temp_dir& dir,
                                  std::vector<std::string> more = {}) {
  std::vector<std::string> args{"wordcount", "--input", input, "--output", output, "--checkpoint-dir",
                                dir.file("chk"), "--checkpoint-interval-ms", "40", "--parallelism", "2", "--quiet"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

const std::vector<std::string> windowed{"--window-lines", "250", "--slow-sink-us", "2000", "--checkpoint-mode",
                                        "unaligned"};

}  // namespace

TEST_CASE("wordcount from a JetStream stream into a PostgreSQL table, SIGKILLed at random moments, equals an independent count") {
  SLUICE_SKIP_WITHOUT_NATS();
  SLUICE_SKIP_WITHOUT_POSTGRES();
  temp_dir dir;
  nats_server nats(subdir(dir, "nats"));
  nats.start();
  temp_dir pg_dir;  // its own: the server runs as the postgres user, who cannot enter `dir`
  postgres_server pg(pg_dir.path());
  pg.start();
  const corpus c = make_corpus(20000, 400, Catch::rngSeed());
  runtime::sync_wait(fill_stream(nats.port(), "lines", c.lines));
  std::mt19937 random(Catch::rngSeed());
  int landed = 0;
  // The totals come out at the end of the input, 200 per sink task at 2 ms each: kills land while
  // reading, while the totals are written, and between checkpoints' commits.
  const int code = run_with_kills(
      job_args(nats_at(nats, "lines"), pg.url("counts"), dir, {"--bounded", "--slow-sink-us", "5000"}),
      dir.file("job.log"), 4, random, 50, 900, landed);
  INFO(read_whole_file(dir.file("job.log")));
  REQUIRE(code == 0);
  std::printf("measured: JetStream -> PostgreSQL word count: %d SIGKILLs landed\n", landed);
  CHECK(table_lines(pg, "counts") == c.count_lines());
}

TEST_CASE("wordcount from JetStream into JetStream, SIGKILLed at random moments: every count line is published once") {
  SLUICE_SKIP_WITHOUT_NATS();
  temp_dir dir;
  nats_server nats(subdir(dir, "nats"));
  nats.start();
  const corpus c = make_corpus(20000, 400, Catch::rngSeed() + 1);
  runtime::sync_wait(fill_stream(nats.port(), "lines", c.lines));
  std::mt19937 random(Catch::rngSeed() + 1);
  int landed = 0;
  const int code = run_with_kills(
      job_args(nats_at(nats, "lines"), nats_at(nats, "counts"), dir, {"--bounded", "--slow-sink-us", "5000"}),
      dir.file("job.log"), 4, random, 50, 900, landed);
  INFO(read_whole_file(dir.file("job.log")));
  REQUIRE(code == 0);
  std::printf("measured: JetStream -> JetStream word count: %d SIGKILLs landed\n", landed);
  // The sink made the stream `counts` for its subject; no line twice, none missing.
  CHECK(sorted(runtime::sync_wait(read_stream(nats.port(), "counts"))) == c.count_lines());
}

TEST_CASE("a stream input without --bounded, or an unknown URL, is refused before anything runs (exit 2)") {
  temp_dir dir;
  tool_run unbounded = run_sluice(job_args("nats://127.0.0.1:1/lines", dir.file("out"), dir));
  CHECK(unbounded.exit_code == 2);
  CHECK_THAT(unbounded.err, Catch::Contains("--bounded"));
  tool_run unknown = run_sluice(job_args("ftp://example/x", dir.file("out"), dir));
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("ftp://"));
  tool_run bad_table = run_sluice(
      job_args(dir.file("in.txt"), "postgresql://u@/db?host=/tmp&table=x;drop", dir));
  CHECK(bad_table.exit_code == 2);
  tool_run windows_of_a_stream =
      run_sluice(job_args("nats://127.0.0.1:1/lines", dir.file("out"), dir, {"--bounded", "--window-lines", "10"}));
  CHECK(windows_of_a_stream.exit_code == 2);
  CHECK_THAT(windows_of_a_stream.err, Catch::Contains("--window-lines"));
  CHECK(!std::filesystem::exists(dir.file("chk")));
  CHECK(!std::filesystem::exists(dir.file("out")));
}

namespace {

// Writes the corpus as the job's input file.
std::string write_input(const temp_dir& dir, const corpus& c) {
  std::ofstream in(dir.file("in.txt"));
  for (const auto& l : c.lines) in << l << "\n";
  return dir.file("in.txt");
}

// Runs the job until its third checkpoint, then `stop_server()`: the job must fail (exit 1) with
// `named` in its words. Then `start_server()` and the job again: it resumes and ends (exit 0).
template <class Stop, class Start>
void fail_then_resume(const std::vector<std::string>& args, const temp_dir& dir, Stop stop_server,
                      const std::string& named, Start start_server) {
  {
    tool_process job(args, dir.file("job1.log"));
    // (Once, loaded, no third checkpoint came within 30 s; the log says why, if it fails again.)
    const bool checkpointed = poll_until([&] { return newest_checkpoint(dir.file("chk")) >= 3; }, 60s);
    if (!checkpointed) FAIL("no third checkpoint within 60 s; the job's log:\n" << job.log());
    stop_server();
    const std::optional<int> code = job.wait(60s);
    INFO(job.log());
    REQUIRE(code.has_value());
    CHECK(*code == 1);
    CHECK_THAT(job.log(), Catch::Contains(named));
    std::printf("the job's words when its server went:\n%s\n", job.log().c_str());
  }
  start_server();
  tool_process again(args, dir.file("job2.log"));
  const std::optional<int> code = again.wait(120s);
  INFO(again.log());
  REQUIRE(code == 0);
  CHECK_THAT(again.log(), Catch::Contains("resumed from checkpoint"));
}

}  // namespace

// Windows of 250 lines come out as the input is read, slowly (2 ms a line; 20 windows): the server
// goes while they are published, between checkpoints (unaligned: they do not wait for the slow sink).
TEST_CASE("a NATS server stopped mid-job: the job fails naming it, and a restart once it is back is exact") {
  SLUICE_SKIP_WITHOUT_NATS();
  temp_dir dir;
  nats_server nats(subdir(dir, "nats"));
  nats.start();
  const corpus c = make_corpus(5000, 300, Catch::rngSeed() + 2);
  const auto args = job_args(write_input(dir, c), nats_at(nats, "counts"), dir, windowed);
  fail_then_resume(args, dir, [&] { nats.kill(); }, "127.0.0.1:" + std::to_string(nats.port()), [&] { nats.start(); });
  CHECK(sorted(runtime::sync_wait(read_stream(nats.port(), "counts"))) == c.window_lines(250));
}

TEST_CASE("a PostgreSQL server stopped mid-job: the job fails naming it, and a restart once it is back is exact") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  temp_dir dir;
  temp_dir pg_dir;  // its own: the server runs as the postgres user, who cannot enter `dir`
  postgres_server pg(pg_dir.path());
  pg.start();
  const corpus c = make_corpus(5000, 300, Catch::rngSeed() + 3);
  const auto args = job_args(write_input(dir, c), pg.url("counts"), dir, windowed);
  fail_then_resume(args, dir, [&] { pg.stop(); }, "postgresql", [&] { pg.start(); });
  CHECK(table_lines(pg, "counts", "window_start, word, count") == c.window_lines(250));
}

// Every `sluice wordcount` is a job named "wordcount": keyed on that name, the second job's commit
// markers (PostgreSQL) and message ids (JetStream) were the first one's, and its output was
// dropped as already committed, exit 0. Two jobs run side by side, then the first again afresh.
TEST_CASE("two wordcount jobs side by side into one PostgreSQL database and one JetStream subject each deliver all their output") {
  SLUICE_SKIP_WITHOUT_NATS();
  SLUICE_SKIP_WITHOUT_POSTGRES();
  temp_dir dir_a, dir_b, dir_again, dir_b_nats, dir_a_fresh;
  nats_server nats(subdir(dir_a, "nats"));
  nats.start();
  temp_dir pg_dir;  // its own: the server runs as the postgres user, who cannot enter `dir`
  postgres_server pg(pg_dir.path());
  pg.start();
  const corpus a = make_corpus(3000, 200, Catch::rngSeed() + 6);
  const corpus b = make_corpus(2000, 150, Catch::rngSeed() + 7);
  const std::string input_a = write_input(dir_a, a), input_b = write_input(dir_b, b);
  {
    tool_process job_a(job_args(input_a, pg.url("counts_a"), dir_a), dir_a.file("job.log"));
    tool_process job_b(job_args(input_b, pg.url("counts_b"), dir_b), dir_b.file("job.log"));
    const std::optional<int> code_a = job_a.wait(120s), code_b = job_b.wait(120s);
    INFO(job_a.log() << "\n" << job_b.log());
    REQUIRE(code_a == 0);
    REQUIRE(code_b == 0);
  }
  CHECK(table_lines(pg, "counts_a") == a.count_lines());
  CHECK(table_lines(pg, "counts_b") == b.count_lines());
  {
    // The same jobs into one subject (new checkpoint directories: other outputs are other jobs).
    const auto args_a = job_args(input_a, nats_at(nats, "counts"), dir_again);
    const auto args_b = job_args(input_b, nats_at(nats, "counts"), dir_b_nats);
    tool_process job_a(args_a, dir_again.file("job.log"));
    tool_process job_b(args_b, dir_b_nats.file("job.log"));
    const std::optional<int> code_a = job_a.wait(120s), code_b = job_b.wait(120s);
    INFO(job_a.log() << "\n" << job_b.log());
    REQUIRE(code_a == 0);
    REQUIRE(code_b == 0);
  }
  std::vector<std::string> both = a.count_lines();
  const std::vector<std::string> lines_b = b.count_lines();
  both.insert(both.end(), lines_b.begin(), lines_b.end());
  CHECK(sorted(runtime::sync_wait(read_stream(nats.port(), "counts"))) == sorted(both));
  // Job a started afresh (a new checkpoint directory) into a table it filled before: the same
  // counts again, through markers of its own (the earlier run's rows are overwritten by key).
  {
    tool_process again(job_args(input_a, pg.url("counts_a"), dir_a_fresh), dir_a_fresh.file("job.log"));
    const std::optional<int> code = again.wait(120s);
    INFO(again.log());
    REQUIRE(code == 0);
  }
  CHECK(table_lines(pg, "counts_a") == a.count_lines());
}

#ifdef SLUICE_KAFKA_MOCK_CLUSTER_PATH
TEST_CASE("wordcount from a Kafka topic (the mock cluster) into files, SIGKILLed at random moments, equals an independent count") {
  using sluice::kafka::test::mock_cluster_process;
  temp_dir dir;
  mock_cluster_process cluster({"1", "lines:3"});
  REQUIRE(!cluster.bootstrap().empty());
  const corpus c = make_corpus(20000, 400, Catch::rngSeed() + 4);
  sluice::kafka::test::produce(cluster.bootstrap(), "lines", c.lines, [](std::size_t i) { return i % 3; });
  std::mt19937 random(Catch::rngSeed() + 4);
  int landed = 0;
  const int code = run_with_kills(job_args("kafka://" + cluster.bootstrap() + "/lines", dir.file("out"), dir,
                                           {"--bounded", "--slow-sink-us", "5000"}),
                                  dir.file("job.log"), 4, random, 50, 900, landed);
  INFO(read_whole_file(dir.file("job.log")));
  REQUIRE(code == 0);
  std::printf("measured: Kafka -> files word count: %d SIGKILLs landed\n", landed);
  CHECK(published_lines(dir.file("out")) == c.count_lines());
}

TEST_CASE("wordcount from a Kafka topic through the mock's injected broker errors, a broker down and a moved leader: exact") {
  using sluice::kafka::test::mock_cluster_process;
  temp_dir dir;
  mock_cluster_process cluster({"3", "lines:3"});
  REQUIRE(!cluster.bootstrap().empty());
  const corpus c = make_corpus(20000, 400, Catch::rngSeed() + 5);
  sluice::kafka::test::produce(cluster.bootstrap(), "lines", c.lines, [](std::size_t i) { return i % 3; });
  // Retriable errors: Fetch (1) answered NOT_LEADER_FOR_PARTITION (6) and ListOffsets (2, the
  // bound's watermarks) REQUEST_TIMED_OUT (7) a few times each.
  REQUIRE(cluster.command("errors 1 30 6") == "ok");
  REQUIRE(cluster.command("errors 2 3 7") == "ok");
  std::mt19937 random(Catch::rngSeed() + 5);
  std::atomic<bool> done{false};
  std::thread weather([&] {
    for (int round = 0; !done && round < 3; ++round) {  // three rounds, then calm: the job must end
      std::this_thread::sleep_for(150ms);
      (void)cluster.command("down " + std::to_string(1 + round % 3));
      std::this_thread::sleep_for(250ms);
      (void)cluster.command("up " + std::to_string(1 + round % 3));
      (void)cluster.command("leader lines " + std::to_string(round % 3) + " " + std::to_string(1 + (round + 1) % 3));
    }
  });
  int landed = 0;
  const int code = run_with_kills(job_args("kafka://" + cluster.bootstrap() + "/lines", dir.file("out"), dir,
                                           {"--bounded", "--slow-sink-us", "5000"}),
                                  dir.file("job.log"), 2, random, 50, 900, landed);
  done = true;
  weather.join();
  INFO(read_whole_file(dir.file("job.log")));
  REQUIRE(code == 0);
  std::printf("measured: Kafka (injected errors, brokers down) -> files word count: %d SIGKILLs landed\n", landed);
  CHECK(published_lines(dir.file("out")) == c.count_lines());
}
#endif
