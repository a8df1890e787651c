#pragma once
// An asynchronous PostgreSQL connection: libpq in NON-BLOCKING mode, its socket polled by the
// executor's backend (io::wait_fd), so a statement in flight never blocks the executor.
//
// - connect(conninfo): PQconnectStartParams (the conninfo or postgresql:// URI expanded, plus TCP
//   keepalives and tcp_user_timeout, so a server that vanishes without a FIN is noticed in about
//   ten seconds rather than never), then PQconnectPoll, waiting for readable or writable as it
//   asks; then PQsetnonblocking. A host NAME is resolved by libpq synchronously inside
//   PQconnectStart: give a Unix socket directory, an address (hostaddr) or "localhost".
// - exec(sql, params): PQsendQueryParams with text parameters, PQflush until everything is sent
//   (waiting for writable, and reading meanwhile so the server is never stuck behind us), then
//   PQconsumeInput / PQisBusy / PQgetResult, waiting for readable. A server that goes away
//   mid-statement ends the wait with POLLHUP/POLLIN, libpq then reports the broken connection, and
//   exec returns that error: never a hang.
// - Errors name the server (host, port, database), the statement (its first 120 characters) and
//   libpq's message (PQerrorMessage or the result's message). A parameter with a NUL byte is an
//   error before anything is sent: libpq passes text parameters as C strings and would cut it there.
// One connection belongs to one executor; one statement at a time.

#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct pg_conn;
struct pg_result;

namespace sluice::postgres {

using params = std::vector<std::optional<std::string>>;

// A statement's outcome: its rows (text) and the affected row count (PQcmdTuples).
struct query_result {
  std::vector<std::vector<std::optional<std::string>>> rows;
  std::uint64_t affected = 0;
};

class connection {
 public:
  connection() = default;
  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection();

  static runtime::task<io::result<connection>> connect(std::string conninfo);

  runtime::task<io::result<query_result>> exec(std::string sql, params values = {});

  bool is_open() const noexcept { return conn_ != nullptr; }
  // "host:port/db" for error messages.
  const std::string& server() const noexcept { return server_; }
  // The session's client_encoding ("UTF8", "LATIN1", ...): what text values must be valid in.
  std::string client_encoding() const;
  void close() noexcept;

 private:
  explicit connection(pg_conn* conn) noexcept;
  io::error failure(const std::string& what) const;
  runtime::task<io::result<void>> flush(const std::string& sql);

  pg_conn* conn_ = nullptr;
  std::string server_;
};

}  // namespace sluice::postgres
