// Not a timed test (hidden, tag [.bench]): rows/s into a real PostgreSQL through the sink's commit
// path, beside a baseline of blocking libpq COPY into the same kind of table.
//   build/release/tests/postgres_tests "[bench]"

#pragma GCC diagnostic ignored "-Wstringop-overflow"  // GCC 12 false positives on string concatenation at -O3
#pragma GCC diagnostic ignored "-Wrestrict"

#include <sluice/postgres/connection.hpp>
#include <sluice/postgres/sink.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <support/postgres_server.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>

using namespace sluice;
using namespace sluice::postgres;
using runtime::sync_wait;
using runtime::task;
using word_count = std::pair<std::string, std::int64_t>;

namespace {

task<io::result<void>> through_sink(std::string url, std::vector<std::string> keys, std::size_t rows, std::size_t per_checkpoint) {
  auto spec = sink_spec<word_count>(url, {"word", "count"}, keys, [](const word_count& w) {
    return row{w.first, std::to_string(w.second)};
  });
  dataflow::connector_context ctx;
  ctx.job = "bench-" + url;  // a marker of its own per table
  auto s = spec.make(ctx);
  auto r = co_await s->recover({});
  if (!r.ok()) co_return r.error();
  std::uint64_t id = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    auto w = co_await s->write(word_count{"w" + std::to_string(i), static_cast<std::int64_t>(i)});
    if (!w.ok()) co_return w.error();
    if ((i + 1) % per_checkpoint == 0) {
      auto p = co_await s->precommit(++id);
      if (!p.ok()) co_return p.error();
      auto c = co_await s->commit(id);
      if (!c.ok()) co_return c.error();
    }
  }
  co_return io::result<void>{};
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("postgres sink throughput beside a COPY baseline", "[.][bench][postgres]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  constexpr std::size_t rows = 200000;
  PGconn* c = PQconnectdb(pg.conninfo().c_str());
  REQUIRE(PQstatus(c) == CONNECTION_OK);
  PQclear(PQexec(c, "CREATE TABLE plain (word text, count bigint)"));
  PQclear(PQexec(c, "CREATE TABLE keyed (word text PRIMARY KEY, count bigint)"));
  PQclear(PQexec(c, "CREATE TABLE copied (word text, count bigint)"));

  auto t0 = std::chrono::steady_clock::now();
  PQclear(PQexec(c, "COPY copied FROM STDIN"));
  std::string chunk;
  for (std::size_t i = 0; i < rows; ++i) {
    chunk += "w" + std::to_string(i) + "\t" + std::to_string(i) + "\n";
    if (chunk.size() > 65536 || i + 1 == rows) {
      REQUIRE(PQputCopyData(c, chunk.data(), static_cast<int>(chunk.size())) == 1);
      chunk.clear();
    }
  }
  REQUIRE(PQputCopyEnd(c, nullptr) == 1);
  PGresult* done = PQgetResult(c);
  REQUIRE(PQresultStatus(done) == PGRES_COMMAND_OK);
  PQclear(done);
  const double copy_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  auto plain = sync_wait(through_sink(pg.url("plain"), {}, rows, 10000));
  const double plain_s = seconds_since(t0);
  REQUIRE(plain.ok());
  t0 = std::chrono::steady_clock::now();
  auto keyed = sync_wait(through_sink(pg.url("keyed"), {"word"}, rows, 10000));
  const double keyed_s = seconds_since(t0);
  REQUIRE(keyed.ok());
  for (const char* table : {"copied", "plain", "keyed"}) {
    PGresult* n = PQexec(c, (std::string("SELECT count(*) FROM ") + table).c_str());
    REQUIRE(std::stoull(PQgetvalue(n, 0, 0)) == rows);
    PQclear(n);
  }
  PQfinish(c);
  std::printf("rows %zu: COPY baseline %.0f rows/s; sink plain INSERT %.0f rows/s; sink upsert %.0f rows/s "
              "(10000 rows per checkpoint, 1000 rows per statement)\n",
              rows, rows / copy_s, rows / plain_s, rows / keyed_s);
}
