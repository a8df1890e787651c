// The exactly-once PostgreSQL sink's untyped part (see sink.hpp).

#include <sluice/postgres/sink.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace sluice::postgres {

namespace {

void put64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

struct reader {
  std::span<const std::byte> in;
  std::size_t at = 0;
  std::uint64_t get64() {
    if (in.size() - at < 8) throw std::runtime_error("postgresql sink: the checkpoint's pending batches are truncated");
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[at + i]) << (8 * i);
    at += 8;
    return v;
  }
  std::string bytes(std::uint64_t n) {
    if (in.size() - at < n) throw std::runtime_error("postgresql sink: the checkpoint's pending batches are truncated");
    std::string s(reinterpret_cast<const char*>(in.data() + at), n);
    at += n;
    return s;
  }
};

constexpr std::uint64_t null_length = ~std::uint64_t{0};
// Rows per INSERT statement: PostgreSQL takes at most 65535 parameters in one.
constexpr std::size_t max_params = 60000;
constexpr std::size_t max_rows_per_statement = 1000;

io::error sink_error(std::string message) { return io::error(std::make_error_code(std::errc::io_error), std::move(message)); }

std::string join(const std::vector<std::string>& v, const std::string& prefix = "") {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + prefix + v[i];
  return s;
}

// Where `s` stops being UTF-8 as PostgreSQL checks it (pg_utf8_islegal: no overlong forms, no
// surrogates, nothing above U+10FFFF); nullopt if it is valid.
std::optional<std::size_t> invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {  // bound: each pass moves i forward by 1 to 4
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (s.size() - i < n) return i;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += n;
  }
  return std::nullopt;
}

// A row as ('a', NULL, ...) for an error message: bytes other than printable ASCII as \xNN, each
// value cut at 64 bytes.
std::string shown(const row& r) {
  std::string out = "(";
  for (std::size_t j = 0; j < r.size(); ++j) {
    if (j > 0) out += ", ";
    if (!r[j]) {
      out += "NULL";
      continue;
    }
    out += "'";
    for (std::size_t k = 0; k < r[j]->size(); ++k) {
      if (k == 64) {
        out += "...";
        break;
      }
      const auto c = static_cast<unsigned char>((*r[j])[k]);
      if (c < 0x20 || c >= 0x7F || c == '\\' || c == '\'') {
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += static_cast<char>(c);
      }
    }
    out += "'";
  }
  return out + ")";
}

}  // namespace

std::vector<std::byte> encode_batches(const std::vector<batch>& batches) {
  std::vector<std::byte> out;
  put64(out, batches.size());
  for (const batch& b : batches) {
    put64(out, b.checkpoint);
    put64(out, b.rows.size());
    for (const row& r : b.rows) {
      put64(out, r.size());
      for (const auto& v : r) {
        put64(out, v ? v->size() : null_length);
        if (v) for (char c : *v) out.push_back(static_cast<std::byte>(c));
      }
    }
  }
  return out;
}

std::vector<batch> decode_batches(std::span<const std::byte> bytes) {
  reader in{bytes};
  std::vector<batch> out(in.get64());
  for (batch& b : out) {
    b.checkpoint = in.get64();
    b.rows.resize(in.get64());
    for (row& r : b.rows) {
      r.resize(in.get64());
      for (auto& v : r) {
        const std::uint64_t n = in.get64();
        if (n != null_length) v = in.bytes(n);
      }
    }
  }
  if (in.at != bytes.size()) throw std::runtime_error("postgresql sink: trailing bytes after the checkpoint's pending batches");
  return out;
}

row_sink::row_sink(table_spec spec, std::string job, std::uint64_t task)
    : spec_(std::move(spec)), name_(std::move(job)), job_(name_), task_(task) {}

runtime::task<io::result<void>> row_sink::ensure_connected() {
  if (conn_.is_open()) co_return io::result<void>{};
  auto c = co_await connection::connect(spec_.conninfo);
  if (!c.ok()) co_return c.error();
  conn_ = std::move(c.value());
  // Parallel tasks may race to create it (a unique violation on pg_type): try twice.
  const std::string ddl =
      "CREATE TABLE IF NOT EXISTS sluice_commits (job text NOT NULL, task int NOT NULL, checkpoint bigint NOT NULL, "
      "PRIMARY KEY (job, task))";
  auto made = co_await conn_.exec(ddl);
  if (!made.ok()) made = co_await conn_.exec(ddl);
  if (made.ok() && !spec_.create.empty()) {
    made = co_await conn_.exec(spec_.create);
    if (!made.ok()) made = co_await conn_.exec(spec_.create);
  }
  if (!made.ok()) {
    conn_.close();
    co_return made.error();
  }
  utf8_ = conn_.client_encoding() == "UTF8";
  co_return io::result<void>{};
}

io::result<void> row_sink::stage(row r) {
  for (std::size_t j = 0; j < r.size(); ++j) {
    if (!r[j]) continue;
    std::string column("#");  // (a row of more values than columns fails its commit, naming that)
    if (j < spec_.columns.size()) column = spec_.columns[j];
    std::string why;
    if (const std::size_t nul = r[j]->find('\0'); nul != std::string::npos) {
      why = "holds a NUL byte (at byte " + std::to_string(nul) +
            "), which PostgreSQL text cannot (libpq would cut the value there, and two values could become one)";
    } else if (const std::optional<std::size_t> bad = utf8_ ? invalid_utf8_at(*r[j]) : std::nullopt) {
      why = "is not valid UTF-8 (at byte " + std::to_string(*bad) + "), the connection's client_encoding";
    } else {
      continue;
    }
    return sink_error("postgresql sink for " + spec_.table + ": the record " + shown(r) + " cannot be stored: column " +
                      column + " " + why);
  }
  staged_.push_back(std::move(r));
  return {};
}

runtime::task<io::result<void>> row_sink::recover(dataflow::sink_recovery from) {
  staged_.clear();
  pending_.clear();
  if (auto named = dataflow::require_run(from, "postgresql sink"); !named) co_return named.error();
  job_ = name_ + "/" + from.run;
  auto up = co_await ensure_connected();
  if (!up.ok()) co_return up.error();
  std::vector<batch> batches = from.precommitted.empty() ? std::vector<batch>{} : decode_batches(from.precommitted);  // empty: a fresh start
  for (batch& b : batches) {
    auto r = co_await apply(std::move(b));
    if (!r.ok()) co_return r.error();
  }
  co_return io::result<void>{};
}

std::vector<std::byte> row_sink::precommit(std::uint64_t id) {
  batch b{id, std::move(staged_)};
  staged_.clear();
  if (!spec_.keys.empty() && b.rows.size() > 1) {
    // One row per key, the last one: ON CONFLICT DO UPDATE cannot touch a row twice in a statement.
    std::vector<std::size_t> key_at;
    for (const auto& k : spec_.keys) {
      auto it = std::find(spec_.columns.begin(), spec_.columns.end(), k);
      key_at.push_back(static_cast<std::size_t>(it - spec_.columns.begin()));
    }
    std::map<row, std::size_t> last;
    for (std::size_t i = 0; i < b.rows.size(); ++i) {
      row key;
      for (std::size_t k : key_at) key.push_back(k < b.rows[i].size() ? b.rows[i][k] : std::nullopt);
      last[std::move(key)] = i;
    }
    std::vector<std::size_t> keep;
    for (const auto& [key, i] : last) keep.push_back(i);
    std::sort(keep.begin(), keep.end());
    std::vector<row> rows;
    rows.reserve(keep.size());
    for (std::size_t i : keep) rows.push_back(std::move(b.rows[i]));
    b.rows = std::move(rows);
  }
  if (!b.rows.empty()) pending_.push_back(std::move(b));
  return encode_batches(pending_);
}

runtime::task<io::result<void>> row_sink::commit(std::uint64_t id) {
  while (!pending_.empty() && pending_.front().checkpoint <= id) {
    auto r = co_await apply(pending_.front());
    if (!r.ok()) co_return r.error();
    pending_.erase(pending_.begin());
  }
  co_return io::result<void>{};
}

runtime::task<io::result<void>> row_sink::apply(batch b) {
  auto up = co_await ensure_connected();
  if (!up.ok()) co_return up.error();
  auto r = co_await apply_in_transaction(std::move(b));
  if (!r.ok()) conn_.close();  // the next attempt starts on a fresh connection
  co_return r;
}

runtime::task<io::result<void>> row_sink::apply_in_transaction(batch b) {
  const std::string begin_sql = "BEGIN", rollback_sql = "ROLLBACK", commit_sql = "COMMIT";
  const std::string marker_sql =
      "INSERT INTO sluice_commits (job, task, checkpoint) VALUES ($1, $2, $3) ON CONFLICT (job, task) DO UPDATE SET "
      "checkpoint = EXCLUDED.checkpoint WHERE sluice_commits.checkpoint < EXCLUDED.checkpoint";
  params marker{job_, std::to_string(task_), std::to_string(b.checkpoint)};
  auto begun = co_await conn_.exec(begin_sql);
  if (!begun.ok()) co_return begun.error();
  // The commit is durable before commit() returns, whatever the server's or role's default: with
  // synchronous_commit off, a server crash can lose a transaction already reported committed, and
  // the job, which forgets a committed checkpoint's rows, would never apply them again.
  const std::string durable_sql = "SET LOCAL synchronous_commit TO on";
  auto durable = co_await conn_.exec(durable_sql);
  if (!durable.ok()) co_return durable.error();
  auto marked = co_await conn_.exec(marker_sql, std::move(marker));
  if (!marked.ok()) co_return marked.error();
  if (marked.value().affected == 0) {
    auto back = co_await conn_.exec(rollback_sql);  // already applied
    if (!back.ok()) co_return back.error();
    co_return io::result<void>{};
  }
  const std::size_t ncols = spec_.columns.size();
  std::string tail;
  if (!spec_.keys.empty()) {
    tail = " ON CONFLICT (" + join(spec_.keys) + ") DO ";
    std::vector<std::string> sets;
    for (const auto& c : spec_.columns) {
      if (std::find(spec_.keys.begin(), spec_.keys.end(), c) == spec_.keys.end()) sets.push_back(c + " = EXCLUDED." + c);
    }
    tail += sets.empty() ? "NOTHING" : "UPDATE SET " + join(sets);
  }
  const std::size_t per = std::max<std::size_t>(1, std::min(max_rows_per_statement, max_params / std::max<std::size_t>(1, ncols)));
  for (std::size_t first = 0; first < b.rows.size(); first += per) {
    const std::size_t last = std::min(b.rows.size(), first + per);
    std::string sql = "INSERT INTO " + spec_.table + " (" + join(spec_.columns) + ") VALUES ";
    params values;
    values.reserve((last - first) * ncols);
    for (std::size_t i = first; i < last; ++i) {
      if (b.rows[i].size() != ncols) {
        co_return sink_error("postgresql sink for " + spec_.table + ": a row has " + std::to_string(b.rows[i].size()) +
                             " values for " + std::to_string(ncols) + " columns");
      }
      sql += i == first ? "(" : ", (";
      for (std::size_t j = 0; j < ncols; ++j) {
        values.push_back(std::move(b.rows[i][j]));
        sql += (j ? ", $" : "$") + std::to_string(values.size());
      }
      sql += ")";
    }
    sql += tail;
    auto wrote = co_await conn_.exec(std::move(sql), std::move(values));
    if (!wrote.ok()) co_return wrote.error();
  }
  auto done = co_await conn_.exec(commit_sql);
  if (!done.ok()) co_return done.error();
  co_return io::result<void>{};
}

parsed_url parse_url(const std::string& url) {
  const std::string scheme = url.rfind("postgresql://", 0) == 0 ? "postgresql://" : url.rfind("postgres://", 0) == 0 ? "postgres://" : "";
  if (scheme.empty()) throw std::invalid_argument("postgresql url '" + url + "': not postgresql://...");
  parsed_url out;
  const std::size_t q = url.find('?');
  std::string base = url.substr(0, q);
  std::string kept;
  if (q != std::string::npos) {
    std::string query = url.substr(q + 1);
    std::size_t at = 0;
    while (at <= query.size()) {
      std::size_t amp = query.find('&', at);
      if (amp == std::string::npos) amp = query.size();
      const std::string item = query.substr(at, amp - at);
      if (item.rfind("table=", 0) == 0) {
        out.table = item.substr(6);
      } else if (!item.empty()) {
        if (item.rfind("dbname=", 0) == 0) out.database = item.substr(7);
        kept += (kept.empty() ? "" : "&") + item;
      }
      at = amp + 1;
    }
  }
  if (out.table.empty()) throw std::invalid_argument("postgresql url '" + url + "': no table=NAME parameter");
  // The name goes into SQL text unquoted: only plain identifiers (folded to lower case by the server,
  // as unquoted names are), optionally schema-qualified.
  const auto plain = [](std::string_view part) {
    if (part.empty() || part.size() > 63 || std::isdigit(static_cast<unsigned char>(part.front()))) return false;
    return std::all_of(part.begin(), part.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  };
  const std::size_t dot = out.table.find('.');
  const bool ok = dot == std::string::npos ? plain(out.table)
                                           : plain(std::string_view(out.table).substr(0, dot)) &&
                                                 plain(std::string_view(out.table).substr(dot + 1));
  if (!ok) {
    throw std::invalid_argument("postgresql url '" + url + "': table=" + out.table +
                                " is not a plain name (letters, digits and _, not starting with a digit; SCHEMA.TABLE)");
  }
  const std::size_t slash = base.find('/', scheme.size());
  if (slash != std::string::npos && slash + 1 < base.size()) out.database = base.substr(slash + 1);
  if (out.database.empty()) throw std::invalid_argument("postgresql url '" + url + "': no database name");
  out.conninfo = kept.empty() ? base : base + "?" + kept;
  return out;
}

}  // namespace sluice::postgres
