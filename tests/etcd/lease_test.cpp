// Leases against a real etcd: grant, keepalive, time-to-live, revoke, and expiry that removes keys.

#include "etcd_fixture.hpp"

#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace sluice;
using namespace std::chrono_literals;

namespace {

struct lifecycle {
  etcd::lease granted;
  etcd::lease_ttl ttl;
  std::int64_t renewed = 0;
  etcd::range_response attached, after_revoke;
  io::result<void> revoke_again;
  etcd::lease_ttl ttl_after_revoke;
  io::result<std::int64_t> keepalive_after_revoke = io::error({}, "");
};

runtime::task<lifecycle> grant_keepalive_revoke(etcd::client* c) {
  lifecycle o;
  o.granted = (co_await c->lease_grant(30)).value();
  (void)(co_await c->put("/member/1", "alive", o.granted.id)).value();
  (void)(co_await c->put("/member/2", "alive", o.granted.id)).value();
  o.attached = (co_await c->get_prefix("/member/")).value();
  o.ttl = (co_await c->lease_time_to_live(o.granted.id)).value();
  o.renewed = (co_await c->lease_keepalive(o.granted.id)).value();
  (co_await c->lease_revoke(o.granted.id)).value();
  o.after_revoke = (co_await c->get_prefix("/member/")).value();
  o.revoke_again = co_await c->lease_revoke(o.granted.id);
  o.ttl_after_revoke = (co_await c->lease_time_to_live(o.granted.id)).value();
  o.keepalive_after_revoke = co_await c->lease_keepalive(o.granted.id);
  co_return o;
}

}  // namespace

TEST_CASE("a lease is granted, kept alive, and revoking it removes its keys, and a revoked lease is gone", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(grant_keepalive_revoke(&c));
  CHECK(o.granted.id != 0);
  CHECK(o.granted.ttl_seconds == 30);
  REQUIRE(o.attached.kvs.size() == 2);
  CHECK(o.attached.kvs[0].lease == o.granted.id);
  CHECK(o.ttl.granted_ttl_seconds == 30);
  CHECK(o.ttl.ttl_seconds > 0);
  CHECK(o.ttl.ttl_seconds <= 30);
  CHECK(o.renewed == 30);
  CHECK(o.after_revoke.kvs.empty());
  REQUIRE_FALSE(o.revoke_again.ok());
  CHECK(o.revoke_again.error().code() == etcd::grpc_code::not_found);
  CHECK(o.revoke_again.error().message() ==
        "etcd " + etcd.server.endpoint() +
            ": lease_revoke: etcdserver: requested lease not found (gRPC NOT_FOUND, HTTP 404)");
  CHECK(o.ttl_after_revoke.ttl_seconds == -1);
  REQUIRE_FALSE(o.keepalive_after_revoke.ok());
  CHECK(o.keepalive_after_revoke.error().code() == etcd::errc::lease_expired);
  CHECK(o.keepalive_after_revoke.error().message() ==
        "etcd " + etcd.server.endpoint() + ": lease_keepalive: lease " + std::to_string(o.granted.id) +
            " expired or unknown");
}

namespace {

struct expiry {
  etcd::lease granted;
  std::int64_t kept_alive_rounds = 0;
  etcd::range_response while_kept_alive;
  etcd::range_response after_expiry;
  int polls = 0;
  io::result<std::int64_t> keepalive_after = io::error({}, "");
  etcd::range_response other;
};

// A 1 s lease (etcd's minimum here) kept alive for 2 s survives; left alone, it expires and takes
// its key with it, while a key without a lease stays.
runtime::task<expiry> expire(etcd::client* c) {
  expiry o;
  o.granted = (co_await c->lease_grant(1)).value();
  (void)(co_await c->put("/leader", "me", o.granted.id)).value();
  (void)(co_await c->put("/config", "stays")).value();
  for (int i = 0; i < 8; ++i) {
    (void)co_await runtime::sleep_for(250ms);
    auto renewed = co_await c->lease_keepalive(o.granted.id);
    if (renewed) ++o.kept_alive_rounds;
  }
  o.while_kept_alive = (co_await c->get("/leader")).value();
  for (; o.polls < 100; ++o.polls) {  // at most 5 s
    o.after_expiry = (co_await c->get("/leader")).value();
    if (o.after_expiry.kvs.empty()) break;
    (void)co_await runtime::sleep_for(50ms);
  }
  o.keepalive_after = co_await c->lease_keepalive(o.granted.id);
  o.other = (co_await c->get("/config")).value();
  co_return o;
}

}  // namespace

TEST_CASE("a short lease kept alive survives, and left alone it expires, its key goes, and keepalive says expired", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(expire(&c));
  CHECK(o.granted.ttl_seconds >= 1);
  CHECK(o.kept_alive_rounds == 8);
  CHECK(o.while_kept_alive.kvs.size() == 1);  // 2 s after the grant, alive thanks to the keepalives
  CHECK(o.after_expiry.kvs.empty());
  CHECK(o.polls < 100);
  REQUIRE_FALSE(o.keepalive_after.ok());
  CHECK(o.keepalive_after.error().code() == etcd::errc::lease_expired);
  REQUIRE(o.other.kvs.size() == 1);
}
