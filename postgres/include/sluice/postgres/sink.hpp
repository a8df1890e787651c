#pragma once
// An exactly-once PostgreSQL sink (sink_connector<T>), through connection.hpp's non-blocking libpq.
//
// Design: records are staged in memory (as rows of text parameters, from the caller's row function).
// precommit(id) closes the staged rows into a batch (id, rows) and returns EVERY pending batch,
// encoded, as the bytes kept in checkpoint id. commit(id) applies each pending batch j <= id, in
// ascending order, each in ONE transaction with this task's commit marker:
//   BEGIN;
//   INSERT INTO sluice_commits(job, task, checkpoint) VALUES ('<job name>/<run>', $2, j)
//     ON CONFLICT (job, task) DO UPDATE SET checkpoint = EXCLUDED.checkpoint
//     WHERE sluice_commits.checkpoint < EXCLUDED.checkpoint;
//   -- no row affected: batch j (or a later one) is already applied: ROLLBACK, done
//   INSERT INTO table(columns) VALUES (...), (...) ... [ON CONFLICT (keys) DO UPDATE SET ...];
//   COMMIT;
// recover(from) connects, creates sluice_commits if missing, and applies from.precommitted's batches the
// same way (a repeat is a no-op thanks to the marker); what was staged after it is discarded.
//
// A value PostgreSQL text cannot hold fails write() naming the record and the column, before the
// record is staged: one with a NUL byte (libpq would cut it there, and two words would become one
// key), or one that is not valid in the connection's client_encoding when that is UTF8 (the server
// would refuse the whole batch at commit). So a record the table cannot take never reaches a
// checkpoint, and a commit fails only for what the server decides (a constraint, a lost server).
//
// Exactly once here means: each checkpoint's rows reach the table in exactly one committed
// transaction, however often commit/recover repeat it, because the marker row and the rows commit
// together. With key columns, rows are upserts (the last row of a key within a batch wins; a batch
// holds a key once, as ON CONFLICT DO UPDATE requires); without, plain INSERTs, exact too thanks to
// the marker. The marker is keyed on the sink's run (dataflow::sink_recovery::run), not the job's
// name: two jobs of one name into one database, or a job started afresh, have markers of their own
// (each fresh start leaves one small row per task behind). Not covered: writers other than this job
// to the same rows; rows staged after the last completed checkpoint (never written: a bounded job
// takes a last checkpoint first).
//
// Why not PREPARE TRANSACTION (2PC)? It needs max_prepared_transactions > 0 on the server (0 by
// default); a prepared transaction holds its row locks across the checkpoint interval, so the next
// interval's write of the same key on this one connection would block on them; and a prepared
// transaction abandoned by a dead job keeps its locks until someone finds and resolves it. The
// marker costs one small row per task and needs nothing of the server. The price: pending batches
// live in the checkpoint (bounded by the rows of one or two intervals).

#include <sluice/dataflow/connector.hpp>
#include <sluice/postgres/connection.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sluice::postgres {

using row = std::vector<std::optional<std::string>>;

struct batch {
  std::uint64_t checkpoint = 0;
  std::vector<row> rows;
};

// The byte form of the pending batches in a checkpoint; decode throws std::runtime_error.
std::vector<std::byte> encode_batches(const std::vector<batch>& batches);
std::vector<batch> decode_batches(std::span<const std::byte> bytes);

struct table_spec {
  std::string conninfo;              // libpq conninfo or postgresql:// URI
  std::string table;
  std::vector<std::string> columns;
  std::vector<std::string> keys;     // a subset of columns; empty: plain INSERT
  // Run on each new connection before anything else, e.g. "CREATE TABLE IF NOT EXISTS ..." (empty:
  // the table must exist; a missing one fails the first commit, naming it).
  std::string create;
};

// The untyped part of the sink: the connection, the batches, the transactions.
class row_sink {
 public:
  row_sink(table_spec spec, std::string job, std::uint64_t task);
  // Sets the marker's key (`job` then "<job name>/<run>") and applies the resumed batches.
  runtime::task<io::result<void>> recover(dataflow::sink_recovery from);
  // Stages a row; an error naming the row and its column when a value cannot be stored (above).
  io::result<void> stage(row r);
  std::vector<std::byte> precommit(std::uint64_t id);
  runtime::task<io::result<void>> commit(std::uint64_t id);
  void close() { conn_.close(); }
  std::size_t pending_batches() const noexcept { return pending_.size(); }

 private:
  runtime::task<io::result<void>> ensure_connected();
  runtime::task<io::result<void>> apply(batch b);
  runtime::task<io::result<void>> apply_in_transaction(batch b);

  table_spec spec_;
  std::string name_;  // the job's
  std::string job_;   // the marker's key: "<name>/<run>"
  std::uint64_t task_;
  connection conn_;
  std::vector<row> staged_;
  std::vector<batch> pending_;
  bool utf8_ = false;  // the connection's client_encoding is UTF8: text values must be valid UTF-8
};

template <class T>
class sink final : public dataflow::sink_connector<T> {
 public:
  sink(table_spec spec, std::function<row(const T&)> to_row, const dataflow::connector_context& ctx)
      : rows_(std::move(spec), ctx.job, ctx.task), to_row_(std::move(to_row)) {}
  runtime::task<io::result<void>> recover(dataflow::sink_recovery from) override {
    co_return co_await rows_.recover(std::move(from));
  }
  runtime::task<io::result<void>> write(const T& record) override { co_return rows_.stage(to_row_(record)); }
  runtime::task<io::result<std::vector<std::byte>>> precommit(snapshot::checkpoint_id id) override {
    co_return rows_.precommit(static_cast<std::uint64_t>(id));
  }
  runtime::task<io::result<void>> commit(snapshot::checkpoint_id id) override {
    co_return co_await rows_.commit(static_cast<std::uint64_t>(id));
  }
  runtime::task<void> close() override {
    rows_.close();
    co_return;
  }

 private:
  row_sink rows_;
  std::function<row(const T&)> to_row_;
};

// postgresql://USER@HOST:PORT/DB?table=T or postgresql:///DB?host=/socket/dir&table=T: libpq's URI
// with our `table` parameter taken out. Throws std::invalid_argument naming what is wrong.
struct parsed_url {
  std::string conninfo;  // the URI without table=
  std::string table;
  std::string database;
};
parsed_url parse_url(const std::string& url);

// A sink_spec for stream::write_to. Identity: "sink=postgresql", "postgresql.table=T",
// "postgresql.database=DB" (never the password or host).
template <class T>
dataflow::sink_spec<T> sink_spec(const std::string& url, std::vector<std::string> columns,
                                 std::vector<std::string> keys, std::function<row(const T&)> to_row,
                                 std::string create = {}) {
  parsed_url u = parse_url(url);
  table_spec spec{u.conninfo, u.table, std::move(columns), std::move(keys), std::move(create)};
  dataflow::sink_spec<T> s;
  s.identity = {"sink=postgresql", "postgresql.table=" + u.table, "postgresql.database=" + u.database};
  s.make = [spec, to_row](const dataflow::connector_context& ctx) -> std::unique_ptr<dataflow::sink_connector<T>> {
    return std::make_unique<sink<T>>(spec, to_row, ctx);
  };
  return s;
}

}  // namespace sluice::postgres
