// libpq driven by the executor's ring (see connection.hpp).

#include <sluice/postgres/connection.hpp>

#include <sluice/io/wait_fd.hpp>

#include <libpq-fe.h>
#include <poll.h>

#include <cerrno>
#include <system_error>
#include <utility>

namespace sluice::postgres {

namespace {

std::string trimmed(std::string message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

std::string statement_of(const std::string& sql) {
  return sql.size() <= 120 ? sql : sql.substr(0, 120) + "...";
}

io::error pg_error(std::string message) {
  return io::error(std::make_error_code(std::errc::io_error), std::move(message));
}

}  // namespace

connection::connection(pg_conn* conn) noexcept : conn_(conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  const char* db = PQdb(conn);
  server_ = std::string(host ? host : "?") + ":" + (port ? port : "?") + "/" + (db ? db : "?");
}

connection::connection(connection&& other) noexcept
    : conn_(std::exchange(other.conn_, nullptr)), server_(std::move(other.server_)) {}

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    close();
    conn_ = std::exchange(other.conn_, nullptr);
    server_ = std::move(other.server_);
  }
  return *this;
}

connection::~connection() { close(); }

void connection::close() noexcept {
  if (conn_ != nullptr) PQfinish(std::exchange(conn_, nullptr));  // nonblocking: a Terminate at most
}

std::string connection::client_encoding() const {
  const char* e = conn_ != nullptr ? PQparameterStatus(conn_, "client_encoding") : nullptr;
  return e != nullptr ? e : "";
}

io::error connection::failure(const std::string& what) const {
  return pg_error("postgresql " + server_ + ": " + what + ": " + trimmed(PQerrorMessage(conn_)));
}

runtime::task<io::result<connection>> connection::connect(std::string conninfo) {
  const char* keys[] = {"dbname", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
                        "tcp_user_timeout", "connect_timeout", nullptr};
  const char* values[] = {conninfo.c_str(), "1", "5", "2", "3", "10000", "10", nullptr};
  connection c(PQconnectStartParams(keys, values, 1));
  if (c.conn_ == nullptr) co_return pg_error("postgresql: connect: out of memory");
  if (PQstatus(c.conn_) == CONNECTION_BAD) co_return c.failure("connect");
  PostgresPollingStatusType status = PGRES_POLLING_WRITING;
  while (status != PGRES_POLLING_OK) {
    if (status == PGRES_POLLING_FAILED) co_return c.failure("connect");
    const unsigned events = status == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    auto ready = co_await io::wait_fd(PQsocket(c.conn_), events);
    if (!ready.ok()) co_return pg_error("postgresql " + c.server_ + ": connect: " + ready.error().message());
    status = PQconnectPoll(c.conn_);
  }
  PQsetNoticeProcessor(c.conn_, [](void*, const char*) {}, nullptr);  // "already exists, skipping" and the like
  if (PQsetnonblocking(c.conn_, 1) != 0) co_return c.failure("set non-blocking mode");
  c = connection(std::exchange(c.conn_, nullptr));  // the server string of the host it reached
  co_return std::move(c);
}

runtime::task<io::result<void>> connection::flush(const std::string& sql) {
  for (;;) {
    const int rc = PQflush(conn_);
    if (rc == 0) co_return io::result<void>{};
    if (rc < 0) co_return failure("send " + statement_of(sql));
    auto ready = co_await io::wait_fd(PQsocket(conn_), POLLOUT | POLLIN);
    if (!ready.ok()) co_return pg_error("postgresql " + server_ + ": send " + statement_of(sql) + ": " + ready.error().message());
    if ((ready.value() & POLLIN) != 0 && PQconsumeInput(conn_) == 0) co_return failure("send " + statement_of(sql));
  }
}

runtime::task<io::result<query_result>> connection::exec(std::string sql, params values) {
  if (conn_ == nullptr) co_return pg_error("postgresql: " + statement_of(sql) + ": the connection is closed");
  std::vector<const char*> raw;
  raw.reserve(values.size());
  for (const auto& v : values) {
    if (v && v->find('\0') != std::string::npos) {
      co_return pg_error("postgresql " + server_ + ": " + statement_of(sql) + ": parameter $" +
                         std::to_string(raw.size() + 1) + " holds a NUL byte, which a text value cannot");
    }
    raw.push_back(v ? v->c_str() : nullptr);
  }
  if (PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(raw.size()), nullptr, raw.data(), nullptr, nullptr, 0) == 0) {
    co_return failure(statement_of(sql));
  }
  auto sent = co_await flush(sql);
  if (!sent.ok()) co_return sent.error();
  query_result out;
  std::optional<io::error> err;
  for (;;) {
    while (PQisBusy(conn_) != 0) {
      auto ready = co_await io::wait_fd(PQsocket(conn_), POLLIN);
      if (!ready.ok()) co_return pg_error("postgresql " + server_ + ": " + statement_of(sql) + ": " + ready.error().message());
      if (PQconsumeInput(conn_) == 0) co_return failure(statement_of(sql));
    }
    PGresult* r = PQgetResult(conn_);
    if (r == nullptr) break;
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
      const char* n = PQcmdTuples(r);
      out.affected = (n != nullptr && *n != '\0') ? std::stoull(n) : 0;
      for (int i = 0; i < PQntuples(r); ++i) {
        auto& row = out.rows.emplace_back();
        for (int j = 0; j < PQnfields(r); ++j) {
          if (PQgetisnull(r, i, j)) row.emplace_back(); else row.emplace_back(std::string(PQgetvalue(r, i, j), PQgetlength(r, i, j)));
        }
      }
    } else if (!err) {
      err = pg_error("postgresql " + server_ + ": " + statement_of(sql) + ": " + trimmed(PQresultErrorMessage(r)));
    }
    PQclear(r);
  }
  if (err) co_return *err;
  co_return out;
}

}  // namespace sluice::postgres
