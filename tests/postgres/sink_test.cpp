// The PostgreSQL connection and exactly-once sink against a real PostgreSQL 15 (postgres_server.hpp),
// driven directly through the sink_connector interface.

#pragma GCC diagnostic ignored "-Wstringop-overflow"  // GCC 12 false positives on string concatenation at -O3
#pragma GCC diagnostic ignored "-Wrestrict"

#include <sluice/postgres/connection.hpp>
#include <sluice/postgres/sink.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/postgres_server.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <utility>

using namespace sluice;
using namespace sluice::postgres;
using runtime::sync_wait;
using runtime::task;
using word_count = std::pair<std::string, std::int64_t>;

namespace {

task<io::result<query_result>> run(std::string conninfo, std::string sql, params values = {}) {
  auto c = co_await connection::connect(conninfo);
  if (!c.ok()) co_return c.error();
  co_return co_await c.value().exec(std::move(sql), std::move(values));
}

query_result must(io::result<query_result> r) {
  if (!r.ok()) FAIL(r.error().message());
  return std::move(r.value());
}

std::unique_ptr<dataflow::sink_connector<word_count>> make_sink(const test::postgres_server& pg, std::string table,
                                                                 std::vector<std::string> keys, std::string job = "wc") {
  auto spec = sink_spec<word_count>(pg.url(table), {"word", "count"}, std::move(keys), [](const word_count& w) {
    return row{w.first, std::to_string(w.second)};
  });
  dataflow::connector_context ctx;
  ctx.job = std::move(job);
  ctx.stage = "write";
  ctx.task = 7;
  return spec.make(ctx);
}

task<io::result<std::vector<std::byte>>> write_and_precommit(dataflow::sink_connector<word_count>* s, std::vector<word_count> rows,
                                                               std::uint64_t id) {
  for (const auto& r : rows) {
    auto w = co_await s->write(r);
    if (!w.ok()) co_return w.error();
  }
  co_return co_await s->precommit(id);
}

// A start of run `run` from a checkpoint's bytes (empty: a fresh start).
task<io::result<void>> recover(dataflow::sink_connector<word_count>* s, std::vector<std::byte> state, std::string run) {
  co_return co_await s->recover(dataflow::recovery_of(std::move(state), std::move(run)));
}
task<io::result<void>> recover(dataflow::sink_connector<word_count>* s, std::vector<std::byte> state) {
  return recover(s, std::move(state), "r1");
}
task<io::result<void>> commit(dataflow::sink_connector<word_count>* s, std::uint64_t id) { co_return co_await s->commit(id); }

void ok(const io::result<void>& r) {
  if (!r.ok()) FAIL(r.error().message());
}

std::int64_t count_of(const test::postgres_server& pg, const std::string& sql) {
  auto r = must(sync_wait(run(pg.conninfo(), sql)));
  return std::stoll(*r.rows.at(0).at(0));
}

}  // namespace

TEST_CASE("a postgres connection runs a statement with parameters on the ring", "[postgres]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  auto r = must(sync_wait(run(pg.conninfo(), "SELECT $1::int + 1, NULL::text", params{"41"})));
  REQUIRE(r.rows.size() == 1);
  REQUIRE(r.rows[0][0] == "42");
  REQUIRE_FALSE(r.rows[0][1].has_value());
}

TEST_CASE("a failed statement's error names the server and the statement", "[postgres]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  auto r = sync_wait(run(pg.conninfo(), "SELECT * FROM no_such_table"));
  REQUIRE_FALSE(r.ok());
  INFO(r.error().message());
  REQUIRE(r.error().message().find("SELECT * FROM no_such_table") != std::string::npos);
  REQUIRE(r.error().message().find(pg.dir()) != std::string::npos);
  REQUIRE(r.error().message().find("does not exist") != std::string::npos);
}

TEST_CASE("the postgres url parser takes table= out and names the table and database in the identity", "[postgres]") {
  auto u = parse_url("postgresql://me@db.example:6543/shop?table=counts&sslmode=disable");
  REQUIRE(u.table == "counts");
  REQUIRE(u.database == "shop");
  REQUIRE(u.conninfo == "postgresql://me@db.example:6543/shop?sslmode=disable");
  auto v = parse_url("postgresql:///shop?host=/run/pg&table=t");
  REQUIRE(v.conninfo == "postgresql:///shop?host=/run/pg");
  REQUIRE(v.database == "shop");
  auto spec = sink_spec<word_count>("postgresql://u:secret@h/shop?table=counts", {"word", "count"}, {"word"},
                                    [](const word_count&) { return row{}; });
  REQUIRE(spec.identity == std::vector<std::string>{"sink=postgresql", "postgresql.table=counts", "postgresql.database=shop"});
  REQUIRE_THROWS_AS(parse_url("postgresql://h/shop"), std::invalid_argument);
  // The table name goes into SQL text: plain names only, optionally SCHEMA.TABLE.
  REQUIRE(parse_url("postgresql://h/shop?table=sales.daily_2").table == "sales.daily_2");
  for (const char* bad : {"x;drop", "1abc", "a b", "a.b.c", "\"q\"", "a-b", ".t", "s."}) {
    INFO(bad);
    REQUIRE_THROWS_AS(parse_url(std::string("postgresql://h/shop?table=") + bad), std::invalid_argument);
  }
}

TEST_CASE("a batch committed by commit and again by recover reaches a plain insert table once", "[postgres][sink]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE events (word text, count bigint)")));
  auto first = make_sink(pg, "events", {});
  ok(sync_wait(recover(first.get(), {})));
  auto state = sync_wait(write_and_precommit(first.get(), {{"a", 1}, {"b", 2}, {"a", 3}}, 1)).value();
  ok(sync_wait(commit(first.get(), 1)));
  ok(sync_wait(commit(first.get(), 1)));  // idempotent
  auto second = make_sink(pg, "events", {});
  ok(sync_wait(recover(second.get(), state)));  // a restart from checkpoint 1: applied already
  REQUIRE(count_of(pg, "SELECT count(*) FROM events") == 3);
  REQUIRE(count_of(pg, "SELECT checkpoint FROM sluice_commits WHERE job = 'wc/r1' AND task = 7") == 1);
}

TEST_CASE("a batch of a lower checkpoint after a higher one is a no-op", "[postgres][sink]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE events (word text, count bigint)")));
  auto s = make_sink(pg, "events", {});
  ok(sync_wait(recover(s.get(), {})));
  (void)sync_wait(write_and_precommit(s.get(), {{"late", 2}}, 2)).value();
  ok(sync_wait(commit(s.get(), 2)));
  auto old = make_sink(pg, "events", {});
  ok(sync_wait(recover(old.get(), {})));
  (void)sync_wait(write_and_precommit(old.get(), {{"early", 1}}, 1)).value();
  ok(sync_wait(commit(old.get(), 1)));
  REQUIRE(count_of(pg, "SELECT count(*) FROM events") == 1);
  REQUIRE(count_of(pg, "SELECT count(*) FROM events WHERE word = 'early'") == 0);
}

TEST_CASE("two runs of jobs of one name into one database each get their rows (markers keyed on the run)",
          "[postgres][sink]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE counts_a (word text primary key, count bigint)")));
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE counts_b (word text primary key, count bigint)")));
  // Both are task 7 of job "wc": keyed on the job's name, b's checkpoint 1 looked applied already.
  auto a = make_sink(pg, "counts_a", {"word"});
  ok(sync_wait(recover(a.get(), {}, "aaaa")));
  (void)sync_wait(write_and_precommit(a.get(), {{"x", 1}, {"y", 2}}, 1)).value();
  ok(sync_wait(commit(a.get(), 1)));
  auto b = make_sink(pg, "counts_b", {"word"});
  ok(sync_wait(recover(b.get(), {}, "bbbb")));
  (void)sync_wait(write_and_precommit(b.get(), {{"z", 3}}, 1)).value();
  ok(sync_wait(commit(b.get(), 1)));
  // A fresh start of a's job (a new run) into a's table again: its checkpoint 1 is applied too.
  auto again = make_sink(pg, "counts_a", {"word"});
  ok(sync_wait(recover(again.get(), {}, "cccc")));
  (void)sync_wait(write_and_precommit(again.get(), {{"x", 10}}, 1)).value();
  ok(sync_wait(commit(again.get(), 1)));
  REQUIRE(count_of(pg, "SELECT count(*) FROM counts_b") == 1);
  REQUIRE(count_of(pg, "SELECT count FROM counts_a WHERE word = 'x'") == 10);
  REQUIRE(count_of(pg, "SELECT count(*) FROM sluice_commits WHERE job LIKE 'wc/%'") == 3);
}

namespace {

task<void> crash_server(test::postgres_server* pg) {
  pg->crash();  // blocking, test only: the commit's first statement is in flight by now
  co_return;
}

task<io::result<void>> commit_while_crashing(dataflow::sink_connector<word_count>* s, test::postgres_server* pg) {
  auto [r, crashed] = co_await runtime::when_all(commit(s, 1), crash_server(pg));
  (void)crashed;
  co_return r;
}

}  // namespace

TEST_CASE("a server gone mid-commit gives a clear error, and a recover after its restart applies the batch once",
          "[postgres][sink]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE events (word text, count bigint)")));
  auto s = make_sink(pg, "events", {});
  ok(sync_wait(recover(s.get(), {})));
  std::vector<word_count> rows;
  for (int i = 0; i < 5000; ++i) rows.emplace_back("w" + std::to_string(i), i);
  auto state = sync_wait(write_and_precommit(s.get(), rows, 1)).value();
  auto failed = sync_wait(commit_while_crashing(s.get(), &pg));
  REQUIRE_FALSE(failed.ok());
  INFO(failed.error().message());
  std::printf("the error of a commit whose server crashed: %s\n", failed.error().message().c_str());
  REQUIRE(failed.error().message().find("postgresql") != std::string::npos);
  REQUIRE(failed.error().message().find(dir.path()) != std::string::npos);
  pg.start();
  auto again = make_sink(pg, "events", {});
  const auto recovered = sync_wait(recover(again.get(), state));
  INFO("postgres log:\n" << pg.log_tail());
  ok(recovered);
  ok(sync_wait(recover(again.get(), state)));
  REQUIRE(count_of(pg, "SELECT count(*) FROM events") == 5000);
}

TEST_CASE("a commit is durable even on a server whose default is asynchronous commit: a crash right after loses nothing",
          "[postgres][sink]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE events (word text, count bigint)")));
  must(sync_wait(run(pg.conninfo(), "CHECKPOINT")));  // the table itself is on disk
  pg.stop();
  // Asynchronous commits, and a WAL writer that flushes them only every 10 s: without the sink's
  // own SET LOCAL synchronous_commit, the crash below loses the committed batch.
  pg.settings = {"synchronous_commit=off", "wal_writer_delay=10000"};
  pg.start();
  auto s = make_sink(pg, "events", {});
  ok(sync_wait(recover(s.get(), {})));
  std::vector<word_count> rows;
  for (int i = 0; i < 100; ++i) rows.emplace_back("w" + std::to_string(i), i);
  (void)sync_wait(write_and_precommit(s.get(), rows, 1)).value();
  ok(sync_wait(commit(s.get(), 1)));
  pg.crash();
  pg.start();
  INFO(pg.log_tail());
  REQUIRE(count_of(pg, "SELECT count(*) FROM events") == 100);
}

TEST_CASE("the upsert table equals an independent count over checkpoints, repeats and a restart", "[postgres][sink]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE counts (word text PRIMARY KEY, count bigint)")));
  std::mt19937 random(Catch::rngSeed());
  std::map<std::string, std::int64_t> expected;
  auto s = make_sink(pg, "counts", {"word"});
  ok(sync_wait(recover(s.get(), {})));
  std::vector<std::byte> last_state;
  for (std::uint64_t id = 1; id <= 6; ++id) {
    std::vector<word_count> rows;
    for (int i = 0; i < 300; ++i) {
      const std::string w = "w" + std::to_string(random() % 50);
      rows.emplace_back(w, ++expected[w]);
    }
    last_state = sync_wait(write_and_precommit(s.get(), rows, id)).value();
    if (id % 2 == 0) ok(sync_wait(commit(s.get(), id)));  // some commits cover two checkpoints
  }
  // A restart from checkpoint 6's state (everything applied already) commits nothing twice.
  auto again = make_sink(pg, "counts", {"word"});
  ok(sync_wait(recover(again.get(), last_state)));
  auto table = must(sync_wait(run(pg.conninfo(), "SELECT word, count FROM counts")));
  std::map<std::string, std::int64_t> got;
  for (const auto& r : table.rows) got[*r[0]] = std::stoll(*r[1]);
  REQUIRE(got == expected);
}

namespace {

task<io::result<void>> write_one(dataflow::sink_connector<word_count>* s, word_count w) { co_return co_await s->write(w); }

}  // namespace

// libpq passes a text parameter as a C string: "a\0b" and "a\0c" both went to the server as "a",
// two rows of one key in one upsert, and the commit of the final checkpoint failed with "ON
// CONFLICT DO UPDATE command cannot affect row a second time" (exit 0 then). Bytes that are not
// UTF-8 (the server's encoding here) failed the commit too. Both are refused at write, naming the
// record, and never reach a checkpoint.
TEST_CASE("a record with a NUL byte or bytes that are not UTF-8 fails write naming the record and its column",
          "[postgres][sink]") {
  SLUICE_SKIP_WITHOUT_POSTGRES();
  test::temp_dir dir;
  test::postgres_server pg(dir.path());
  pg.start();
  must(sync_wait(run(pg.conninfo(), "CREATE TABLE counts (word text PRIMARY KEY, count bigint)")));
  auto s = make_sink(pg, "counts", {"word"});
  ok(sync_wait(recover(s.get(), {})));
  const auto nul = sync_wait(write_one(s.get(), {std::string("a\0b", 3), 1}));
  REQUIRE_FALSE(nul.ok());
  CHECK(nul.error().message() ==
        "postgresql sink for counts: the record ('a\\x00b', '1') cannot be stored: column word holds a NUL byte (at "
        "byte 1), which PostgreSQL text cannot (libpq would cut the value there, and two values could become one)");
  for (const std::string& bad : {std::string("caf\xe9"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                                 std::string("\xf4\x90\x80\x80"), std::string("ab\xe2\x82")}) {
    const auto r = sync_wait(write_one(s.get(), {bad, 2}));
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("cannot be stored: column word is not valid UTF-8 (at byte ") != std::string::npos);
  }
  CHECK(sync_wait(write_one(s.get(), {"caf\xc3\xa9 \xf0\x9f\x8c\x8a", 3})).ok());  // "café 🌊"
  CHECK(sync_wait(write_one(s.get(), {"a", 4})).ok());
  (void)sync_wait(write_and_precommit(s.get(), {}, 1)).value();
  ok(sync_wait(commit(s.get(), 1)));
  auto table = must(sync_wait(run(pg.conninfo(), "SELECT word, count FROM counts ORDER BY count")));
  REQUIRE(table.rows.size() == 2);
  CHECK(table.rows[0][0] == "caf\xc3\xa9 \xf0\x9f\x8c\x8a");
  CHECK(table.rows[1][0] == "a");
  // The connection refuses such a parameter itself, whoever passes it.
  auto direct = sync_wait(run(pg.conninfo(), "SELECT $1::text", params{std::string("x\0y", 3)}));
  REQUIRE_FALSE(direct.ok());
  CHECK(direct.error().message().find("parameter $1 holds a NUL byte, which a text value cannot") != std::string::npos);
}
