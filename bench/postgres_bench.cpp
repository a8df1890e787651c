// postgres: rows/s into a real PostgreSQL through the sink's commit path (postgres/sink.hpp),
// beside a plain blocking libpq loop writing the same rows the same way, in the same run.
//
// - Figure: postgres::sink's write() + precommit() + commit() of --records rows (word text, count
//   bigint), a checkpoint every --per-checkpoint rows: each checkpoint's rows in one transaction
//   with the sink's marker row, multi-row INSERTs of 1000 rows with text parameters, libpq in
//   non-blocking mode polled by the runtime. Twice: plain INSERT (no key) and upsert (key `word`,
//   ON CONFLICT DO UPDATE).
// - Baseline: the same statements on a blocking libpq connection, as psql would send them
//   (PQexecParams): BEGIN, INSERT ... VALUES ($1, $2), ... 1000 rows at a time [ON CONFLICT ...],
//   COMMIT every --per-checkpoint rows; no marker row (one small statement per transaction).
// - Out of the server: there is no PostgreSQL source connector, so nothing is measured.
// - PostgreSQL 15 (/usr/lib/postgresql/15/bin, or $SLUICE_PG_BIN) runs for the benchmark as the
//   `postgres` user on a Unix socket in a temporary directory (tests/support/postgres_server.hpp,
//   fsync off). Every table is emptied before each measurement.

#include "bench.hpp"
#include "connector_bench.hpp"

#include <support/postgres_server.hpp>
#include <support/temp_dir.hpp>

#include <sluice/postgres/sink.hpp>
#include <sluice/runtime/engine.hpp>

#include <fmt/core.h>

#include <libpq-fe.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::bench {
namespace {

constexpr std::size_t rows_per_statement = 1000;  // as the sink's

postgres::row row_of(const std::uint64_t& i) { return {fmt::format("w{}", i), std::to_string(i)}; }

// A blocking libpq connection; statements that fail throw, quoting the server.
class blocking_pg {
 public:
  explicit blocking_pg(const std::string& conninfo) : c_(PQconnectdb(conninfo.c_str())) {
    if (PQstatus(c_) != CONNECTION_OK) {
      const std::string why = PQerrorMessage(c_);
      PQfinish(c_);
      throw std::runtime_error("postgres bench: connect: " + why);
    }
  }
  blocking_pg(const blocking_pg&) = delete;
  blocking_pg& operator=(const blocking_pg&) = delete;
  ~blocking_pg() { PQfinish(c_); }

  void exec(const std::string& sql, const std::vector<std::string>& params = {}) {
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const auto& p : params) values.push_back(p.c_str());
    PGresult* r = PQexecParams(c_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0);
    const auto status = PQresultStatus(r);
    const std::string why = PQresultErrorMessage(r);
    PQclear(r);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw std::runtime_error("postgres bench: " + sql.substr(0, 60) + ": " + why);
    }
  }

  std::uint64_t count(const std::string& table) {
    PGresult* r = PQexec(c_, ("SELECT count(*) FROM " + table).c_str());
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    const std::uint64_t n = ok ? std::stoull(PQgetvalue(r, 0, 0)) : 0;
    PQclear(r);
    if (!ok) throw std::runtime_error("postgres bench: count rows of " + table);
    return n;
  }

 private:
  PGconn* c_;
};

class postgres_bench final : public benchmark {
 public:
  std::string_view name() const noexcept override { return "postgres"; }
  std::string_view description() const noexcept override {
    return "rows/s into a real PostgreSQL through the sink's commit path (INSERT and upsert) vs the same statements "
           "from a blocking libpq loop";
  }
  std::vector<option> options() override {
    return {{"--records", "rows per measurement", &records_},
            {"--per-checkpoint", "rows per checkpoint, one transaction each (both)", &per_checkpoint_}};
  }

  void run(const common_options& common, const reporter& out) override {
    if (!test::postgres_server::installed()) {
      throw std::runtime_error(fmt::format("postgres bench: PostgreSQL 15 is not installed in {} with a `postgres` user "
                                           "(apt-get install postgresql-15, or set SLUICE_PG_BIN)",
                                           test::postgres_server::bin_dir()));
    }
    test::temp_dir dir;
    test::postgres_server server(dir.path());
    server.start();
    server_ = &server;
    blocking_pg plain(server.conninfo());
    for (const char* table : {"sink_plain", "base_plain"}) plain.exec(fmt::format("CREATE TABLE {} (word text, count bigint)", table));
    for (const char* table : {"sink_keyed", "base_keyed"}) {
      plain.exec(fmt::format("CREATE TABLE {} (word text PRIMARY KEY, count bigint)", table));
    }
    runtime::engine engine({.executors = 1, .handle_signals = false});
    const double n = static_cast<double>(records_);
    for (const bool keyed : {false, true}) {
      const std::string suffix = keyed ? "keyed" : "plain";
      auto r = measure_paired(
          common.runs, [&] { return n / sink_seconds(engine, plain, "sink_" + suffix, keyed); },
          [&] { return n / plain_seconds(plain, "base_" + suffix, keyed); });
      const std::string what = keyed ? "upsert" : "INSERT";
      connectors::report(out, name(), fmt::format("in (sink, {})", what), "blocking libpq, same statements", r,
                         fmt::format("{} rows, {} per statement", records_, rows_per_statement), records_,
                         per_checkpoint_, common.runs, {{"direction", std::string("in")}, {"statement", what}});
    }
    out.note("postgres: no PostgreSQL source connector exists, so nothing is measured out of the server");
    server_ = nullptr;
    server.stop();
  }

 private:
  void check_rows(blocking_pg& plain, const std::string& table) const {
    const std::uint64_t rows = plain.count(table);
    if (rows != records_) {
      throw std::runtime_error(fmt::format("postgres bench: {} holds {} rows of the {} written", table, rows, records_));
    }
  }

  double sink_seconds(runtime::engine& engine, blocking_pg& plain, const std::string& table, bool keyed) {
    plain.exec("TRUNCATE " + table);
    std::vector<std::string> keys;
    if (keyed) keys.push_back("word");
    auto spec = postgres::sink_spec<std::uint64_t>(server_->url(table), {"word", "count"}, keys, row_of);
    dataflow::connector_context ctx;
    ctx.job = fmt::format("bench{}", runs_++);  // a marker of its own
    auto sink = spec.make(ctx);
    connectors::must(engine.block_on(sink->recover(dataflow::recovery_of())), "postgres sink recover");
    const auto start = bench_clock::now();
    engine.block_on(connectors::drive_sink<std::uint64_t>(sink.get(), records_, per_checkpoint_,
                                                          [](std::uint64_t i) { return i; }, 0));
    const double seconds = seconds_since(start);
    engine.block_on(sink->close());
    check_rows(plain, table);
    return seconds;
  }

  double plain_seconds(blocking_pg& plain, const std::string& table, bool keyed) {
    plain.exec("TRUNCATE " + table);
    const std::string tail = keyed ? " ON CONFLICT (word) DO UPDATE SET count = EXCLUDED.count" : "";
    const auto start = bench_clock::now();
    std::vector<std::string> params;
    std::string sql;
    const auto flush = [&] {
      if (params.empty()) return;
      plain.exec(sql + tail, params);
      params.clear();
    };
    plain.exec("BEGIN");
    for (std::uint64_t i = 0; i < records_; ++i) {
      if (params.empty()) sql = "INSERT INTO " + table + " (word, count) VALUES ";
      sql += params.empty() ? "(" : ", (";
      for (auto& v : row_of(i)) {
        params.push_back(std::move(*v));
        sql += (params.size() % 2 == 1 ? "$" : ", $") + std::to_string(params.size());
      }
      sql += ")";
      if (params.size() == 2 * rows_per_statement) flush();
      if ((i + 1) % per_checkpoint_ == 0 || i + 1 == records_) {
        flush();
        plain.exec("COMMIT");
        if (i + 1 < records_) plain.exec("BEGIN");
      }
    }
    const double seconds = seconds_since(start);
    check_rows(plain, table);
    return seconds;
  }

  std::uint64_t records_ = 100'000;
  std::uint64_t per_checkpoint_ = 10'000;
  test::postgres_server* server_ = nullptr;
  unsigned runs_ = 0;
};

registration<postgres_bench> reg;

}  // namespace
}  // namespace sluice::bench
