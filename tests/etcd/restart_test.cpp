// A real etcd that is missing, stops, crashes and restarts under a client: calls fail with an error
// that names the endpoint and the call, within the request timeout, and work again after the
// restart; an idle connection that the restart broke is replaced without the caller noticing.

#include "etcd_fixture.hpp"

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace sluice;
using namespace std::chrono_literals;

namespace {

struct timed {
  io::result<std::int64_t> put = io::error({}, "");
  std::chrono::nanoseconds took{};
};

runtime::task<timed> timed_put(etcd::client* c, std::string key, std::string value) {
  timed t;
  const auto start = runtime::executor::current()->now();
  t.put = co_await c->put(std::move(key), std::move(value));
  t.took = runtime::executor::current()->now() - start;
  co_return t;
}

runtime::task<io::result<etcd::range_response>> get_of(etcd::client* c, std::string key) { co_return co_await c->get(std::move(key)); }

runtime::task<io::result<etcd::txn_response>> txn_of(etcd::client* c) {
  // Built before the co_await: GCC 12 rejects string literals in braced lists inside one.
  std::vector<etcd::compare> compares{etcd::compare::exists("/k")};
  std::vector<etcd::op> success{etcd::op::put("/k", "by txn")};
  co_return co_await c->txn(std::move(compares), std::move(success), {});
}

}  // namespace

TEST_CASE("a call to an etcd that is not there fails at once, naming the endpoint, the call and the cause", "[etcd]") {
  test::temp_dir dir;
  const std::string where = "unix://" + dir.file("etcd.sock");
  etcd::client c(etcd::client::parse_endpoint(where).value(), test::quick());
  const auto r = runtime::sync_wait(txn_of(&c));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == std::errc::no_such_file_or_directory);
  CHECK(r.error().message() == "etcd " + where + ": txn: connect: No such file or directory");
}

TEST_CASE("an etcd that stops fails calls quickly and clearly, and after its restart they work again", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  const bool crash = GENERATE(false, true);
  INFO((crash ? "SIGKILL" : "SIGTERM"));
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick(2000ms));
  runtime::executor ex;
  const auto before = ex.block_on(timed_put(&c, "/k", "before"));
  REQUIRE(before.put.ok());

  if (crash) {
    etcd.server.kill();  // the socket file stays behind: connect is refused
  } else {
    etcd.server.stop();  // etcd removes its socket file
  }
  const auto down = ex.block_on(timed_put(&c, "/k", "while down"));
  REQUIRE_FALSE(down.put.ok());
  INFO(down.put.error().message());
  const std::string cause = crash ? "connect: Connection refused" : "connect: No such file or directory";
  CHECK(down.put.error().message() == "etcd " + etcd.server.endpoint() + ": put: " + cause);
  CHECK(down.took < 2000ms);  // it failed by itself, long before the timeout

  etcd.server.start();
  const auto after = ex.block_on(timed_put(&c, "/k", "after"));
  REQUIRE(after.put.ok());
  CHECK(*after.put > *before.put);
  const auto got = ex.block_on(get_of(&c, "/k")).value();
  REQUIRE(got.kvs.size() == 1);
  CHECK(got.kvs[0].value == "after");
  CHECK(got.kvs[0].version == 2);  // the data survived, and the failed put did nothing
}

TEST_CASE("an idle connection broken by a restart is replaced before a put or a txn is sent: each applies once", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  runtime::executor ex;
  REQUIRE(ex.block_on(timed_put(&c, "/k", "1")).put.ok());  // leaves a kept-alive connection

  etcd.server.restart();
  const auto put = ex.block_on(timed_put(&c, "/k", "2"));
  REQUIRE(put.put.ok());  // no error reached the caller

  etcd.server.restart();
  const auto t = ex.block_on(txn_of(&c));
  REQUIRE(t.ok());
  CHECK(t->succeeded);

  const auto got = ex.block_on(get_of(&c, "/k")).value();
  REQUIRE(got.kvs.size() == 1);
  CHECK(got.kvs[0].value == "by txn");
  CHECK(got.kvs[0].version == 3);  // three writes, each applied exactly once
}
