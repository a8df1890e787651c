// Puts, ranges, deletes, compaction and status against a real etcd.

#include "etcd_fixture.hpp"

#include <sluice/runtime/sync_wait.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace sluice;
using etcd::range_options;

namespace {

struct put_get_outcome {
  std::int64_t first_put = 0, second_put = 0;
  etcd::range_response after_first, after_second, missing, after_delete;
  std::int64_t deleted = -1, deleted_again = -1;
};

runtime::task<put_get_outcome> put_get_delete(etcd::client* c) {
  put_get_outcome o;
  o.first_put = (co_await c->put("/k", "one")).value();
  o.after_first = (co_await c->get("/k")).value();
  o.second_put = (co_await c->put("/k", "two")).value();
  o.after_second = (co_await c->get("/k")).value();
  o.missing = (co_await c->get("/nothing")).value();
  o.deleted = (co_await c->del("/k")).value();
  o.deleted_again = (co_await c->del("/k")).value();
  o.after_delete = (co_await c->get("/k")).value();
  co_return o;
}

}  // namespace

TEST_CASE("put, get and del of one key, with revisions and versions that move forward", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(put_get_delete(&c));
  REQUIRE(o.first_put > 0);
  CHECK(o.second_put == o.first_put + 1);
  REQUIRE(o.after_first.kvs.size() == 1);
  const etcd::key_value& one = o.after_first.kvs[0];
  CHECK(one.key == "/k");
  CHECK(one.value == "one");
  CHECK(one.create_revision == o.first_put);
  CHECK(one.mod_revision == o.first_put);
  CHECK(one.version == 1);
  CHECK(one.lease == 0);
  CHECK(o.after_first.revision == o.first_put);
  CHECK(o.after_first.count == 1);
  REQUIRE(o.after_second.kvs.size() == 1);
  CHECK(o.after_second.kvs[0].value == "two");
  CHECK(o.after_second.kvs[0].create_revision == o.first_put);
  CHECK(o.after_second.kvs[0].mod_revision == o.second_put);
  CHECK(o.after_second.kvs[0].version == 2);
  CHECK(o.missing.kvs.empty());
  CHECK(o.missing.count == 0);
  CHECK(o.missing.revision == o.second_put);
  CHECK(o.deleted == 1);
  CHECK(o.deleted_again == 0);
  CHECK(o.after_delete.kvs.empty());
  CHECK(o.after_delete.revision == o.second_put + 1);
}

namespace {

struct prefix_outcome {
  etcd::range_response all, limited, counted, keys_only, every_key, high;
  std::int64_t deleted = 0;
  etcd::range_response after_delete;
};

runtime::task<prefix_outcome> prefixes(etcd::client* c) {
  for (const char* k : {"/job/b", "/job/a", "/job/c", "/jobs", "/other"}) (void)(co_await c->put(k, std::string("v") + k)).value();
  (void)(co_await c->put("p\xff", "1")).value();
  (void)(co_await c->put("p\xff\xff", "2")).value();
  (void)(co_await c->put("q", "3")).value();
  prefix_outcome o;
  o.all = (co_await c->get_prefix("/job/")).value();
  o.limited = (co_await c->get_prefix("/job/", range_options{.limit = 2})).value();
  o.counted = (co_await c->get_prefix("/job/", range_options{.count_only = true})).value();
  o.keys_only = (co_await c->get_prefix("/job/", range_options{.keys_only = true})).value();
  o.every_key = (co_await c->get_prefix("")).value();
  o.high = (co_await c->get_prefix("p\xff")).value();
  o.deleted = (co_await c->del_prefix("/job/")).value();
  o.after_delete = (co_await c->get_prefix("/job")).value();
  co_return o;
}

std::vector<std::string> keys(const etcd::range_response& r) {
  std::vector<std::string> out;
  for (const auto& kv : r.kvs) out.push_back(kv.key);
  return out;
}

}  // namespace

TEST_CASE("get_prefix and del_prefix take the keys under a prefix, in key order, with limit, count_only and keys_only",
          "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(prefixes(&c));
  CHECK(keys(o.all) == std::vector<std::string>{"/job/a", "/job/b", "/job/c"});
  CHECK(o.all.kvs[1].value == "v/job/b");
  CHECK(o.all.count == 3);
  CHECK_FALSE(o.all.more);
  CHECK(keys(o.limited) == std::vector<std::string>{"/job/a", "/job/b"});
  CHECK(o.limited.count == 3);
  CHECK(o.limited.more);
  CHECK(o.counted.kvs.empty());
  CHECK(o.counted.count == 3);
  CHECK(keys(o.keys_only) == keys(o.all));
  CHECK(o.keys_only.kvs[0].value.empty());
  CHECK(o.every_key.count == 8);  // "" is every key
  CHECK(keys(o.high) == std::vector<std::string>{"p\xff", "p\xff\xff"});  // the range ends at "q", excluded
  CHECK(o.deleted == 3);
  CHECK(keys(o.after_delete) == std::vector<std::string>{"/jobs"});
}

namespace {

std::string bytes_pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
  return s;
}

runtime::task<std::vector<std::pair<std::string, std::string>>> binary_round_trip(etcd::client* c,
                                                                               std::vector<std::pair<std::string, std::string>> kvs) {
  for (const auto& [k, v] : kvs) (void)(co_await c->put(k, v)).value();
  std::vector<std::pair<std::string, std::string>> back;
  for (const auto& [k, v] : kvs) {
    const auto r = (co_await c->get(k)).value();
    back.emplace_back(r.kvs.empty() ? std::string("<missing>") : r.kvs[0].key, r.kvs.empty() ? std::string() : r.kvs[0].value);
  }
  co_return back;
}

}  // namespace

TEST_CASE("keys and values are any bytes of any length: every base64 padding, NUL and 0xff included", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  std::vector<std::pair<std::string, std::string>> kvs;
  for (std::size_t n = 1; n <= 7; ++n) kvs.emplace_back(bytes_pattern(n, static_cast<unsigned>(n)), bytes_pattern(n - 1, 3));
  kvs.emplace_back(std::string("\0\0", 2), std::string("\xff\xfe\0", 3));
  kvs.emplace_back("big", bytes_pattern(1 << 20, 9));  // 1 MiB: a body that arrives in many receives
  const auto back = runtime::sync_wait(binary_round_trip(&c, kvs));
  REQUIRE(back.size() == kvs.size());
  for (std::size_t i = 0; i < kvs.size(); ++i) {
    INFO("pair " << i);
    CHECK(back[i].first == kvs[i].first);
    CHECK(back[i].second == kvs[i].second);
  }
}

namespace {

struct history_outcome {
  std::int64_t first = 0, second = 0;
  etcd::range_response old_read;
  io::result<etcd::range_response> compacted_read = io::error({}, "");
  io::result<void> future_compact;
  etcd::status_response status;
};

runtime::task<history_outcome> history(etcd::client* c) {
  history_outcome o;
  o.first = (co_await c->put("h", "1")).value();
  o.second = (co_await c->put("h", "2")).value();
  o.old_read = (co_await c->get("h", range_options{.revision = o.first})).value();
  (co_await c->compact(o.second)).value();
  o.compacted_read = co_await c->get("h", range_options{.revision = o.first});
  o.future_compact = co_await c->compact(o.second + 100);
  o.status = (co_await c->status()).value();
  co_return o;
}

}  // namespace

TEST_CASE("a read at an old revision sees the old value until compact, and status names version, leader and term", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(history(&c));
  REQUIRE(o.old_read.kvs.size() == 1);
  CHECK(o.old_read.kvs[0].value == "1");
  REQUIRE_FALSE(o.compacted_read.ok());
  CHECK(o.compacted_read.error().code() == etcd::grpc_code::out_of_range);
  CHECK(o.compacted_read.error().message() ==
        "etcd " + etcd.server.endpoint() +
            ": get: etcdserver: mvcc: required revision has been compacted (gRPC OUT_OF_RANGE, HTTP 400)");
  REQUIRE_FALSE(o.future_compact.ok());
  CHECK(o.future_compact.error().code() == etcd::grpc_code::out_of_range);
  CHECK(o.future_compact.error().message().find("compact: etcdserver: mvcc: required revision is a future revision") !=
        std::string::npos);
  CHECK(o.status.version == "3.4.23");
  CHECK(o.status.leader != 0);
  CHECK(o.status.leader == o.status.member_id);  // alone, it leads
  CHECK(o.status.raft_term >= 1);
  CHECK(o.status.raft_index > 0);
  CHECK(o.status.revision == o.second);
  CHECK(o.status.db_size_bytes > 0);
  CHECK(o.status.errors.empty());
}

namespace {

struct too_large_outcome {
  io::result<etcd::range_response> big = io::error({}, "");
  etcd::range_response small;
};

runtime::task<too_large_outcome> too_large(etcd::client* writer, etcd::client* reader) {
  (void)(co_await writer->put("big", std::string(8000, 'x'))).value();
  (void)(co_await writer->put("small", "y")).value();
  too_large_outcome o;
  o.big = co_await reader->get("big");
  o.small = (co_await reader->get("small")).value();  // the refused response's connection was dropped
  co_return o;
}

}  // namespace

TEST_CASE("a response over max_response_bytes is refused, and the next call still works", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client writer(etcd.where(), test::quick());
  auto options = test::quick();
  options.max_response_bytes = 4096;
  etcd::client reader(etcd.where(), options);
  const auto o = runtime::sync_wait(too_large(&writer, &reader));
  REQUIRE_FALSE(o.big.ok());
  CHECK(o.big.error().code() == etcd::errc::response_too_large);
  CHECK(o.big.error().message() ==
        "etcd " + etcd.server.endpoint() + ": get: response body larger than 4096 bytes: refused");
  REQUIRE(o.small.kvs.size() == 1);
  CHECK(o.small.kvs[0].value == "y");
}
