// Transactions against a real etcd: every compare target and relation, both branches, and the
// operations' results.

#include "etcd_fixture.hpp"

#include <sluice/runtime/sync_wait.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace sluice;
using etcd::compare;
using etcd::op;
using cmp = etcd::compare::result;

namespace {

struct compare_case {
  const char* what;
  compare c;
  bool holds;
};

// "/c" is put twice (version 2) with value "v2" under a lease; "/other" once.
runtime::task<std::vector<std::pair<std::string, bool>>> evaluate(etcd::client* c, std::vector<compare_case>* cases,
                                                                  std::int64_t* create, std::int64_t* mod, std::int64_t* lease) {
  const auto l = (co_await c->lease_grant(60)).value();
  *lease = l.id;
  *create = (co_await c->put("/c", "v1")).value();
  *mod = (co_await c->put("/c", "v2", l.id)).value();
  (void)(co_await c->put("/other", "x")).value();
  std::vector<std::pair<std::string, bool>> results;
  for (auto& k : *cases) {
    // The test cases were written before the revisions were known: fill them in.
    if (k.c.what == compare::target::create) k.c.number += *create;
    if (k.c.what == compare::target::mod) k.c.number += *mod;
    if (k.c.what == compare::target::lease && k.c.number != 0) k.c.number = *lease + (k.c.number - 1);
    // Lists built before the co_await: GCC 12 rejects string literals in braced lists inside one.
    std::vector<compare> compares{k.c};
    std::vector<op> success{op::range(std::string("/c"))};
    std::vector<op> failure{op::range(std::string("/other"))};
    const auto t = (co_await c->txn(std::move(compares), std::move(success), std::move(failure))).value();
    const bool ran_success = t.ranges.size() == 1 && t.ranges[0].size() == 1 && t.ranges[0][0].key == "/c";
    const bool ran_failure = t.ranges.size() == 1 && t.ranges[0].size() == 1 && t.ranges[0][0].key == "/other";
    results.emplace_back(k.what, t.succeeded && ran_success ? true : (!t.succeeded && ran_failure ? false : !k.holds));
  }
  co_return results;
}

}  // namespace

TEST_CASE("txn compares version, create, mod, value and lease with equal, greater, less and not_equal", "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  // Numbers for create/mod are offsets from the real revisions; lease 1 means "the lease", 2 another.
  std::vector<compare_case> cases = {
      {"version == 2", compare::version_is("/c", cmp::equal, 2), true},
      {"version == 1", compare::version_is("/c", cmp::equal, 1), false},
      {"version > 1", compare::version_is("/c", cmp::greater, 1), true},
      {"version > 2", compare::version_is("/c", cmp::greater, 2), false},
      {"version < 3", compare::version_is("/c", cmp::less, 3), true},
      {"version < 2", compare::version_is("/c", cmp::less, 2), false},
      {"version != 1", compare::version_is("/c", cmp::not_equal, 1), true},
      {"version != 2", compare::version_is("/c", cmp::not_equal, 2), false},
      {"create == created", compare::create_is("/c", cmp::equal, 0), true},
      {"create == created+1", compare::create_is("/c", cmp::equal, 1), false},
      {"create < created+1", compare::create_is("/c", cmp::less, 1), true},
      {"create > created", compare::create_is("/c", cmp::greater, 0), false},
      {"mod == modified", compare::mod_is("/c", cmp::equal, 0), true},
      {"mod > modified-1", compare::mod_is("/c", cmp::greater, -1), true},
      {"mod < modified", compare::mod_is("/c", cmp::less, 0), false},
      {"mod != modified", compare::mod_is("/c", cmp::not_equal, 0), false},
      {"value == v2", compare::value_is("/c", cmp::equal, "v2"), true},
      {"value == v1", compare::value_is("/c", cmp::equal, "v1"), false},
      {"value > v1", compare::value_is("/c", cmp::greater, "v1"), true},
      {"value < v1", compare::value_is("/c", cmp::less, "v1"), false},
      {"value != v2", compare::value_is("/c", cmp::not_equal, "v2"), false},
      {"lease == the lease", compare::lease_is("/c", cmp::equal, 1), true},
      {"lease == another", compare::lease_is("/c", cmp::equal, 2), false},
      {"lease != 0", compare::lease_is("/c", cmp::not_equal, 0), true},
      {"exists /c", compare::exists("/c"), true},
      {"missing /c", compare::missing("/c"), false},
      {"missing /nope", compare::missing("/nope"), true},
      {"exists /nope", compare::exists("/nope"), false},
  };
  std::int64_t create = 0, mod = 0, lease = 0;
  const auto results = runtime::sync_wait(evaluate(&c, &cases, &create, &mod, &lease));
  REQUIRE(results.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].what);
    CHECK(results[i].second == cases[i].holds);
  }
}

namespace {

struct branch_outcome {
  etcd::txn_response first, second, mixed;
  etcd::range_response leader, gone;
  std::int64_t lease = 0;
};

// Create-if-missing, the way a leader campaigns: the first txn puts the key, the second finds it
// and reads it instead. Then one txn with every kind of operation.
runtime::task<branch_outcome> branches(etcd::client* c) {
  branch_outcome o;
  o.lease = (co_await c->lease_grant(60)).value().id;
  const std::string leader = "/leader";
  std::vector<compare> campaign{compare::missing(leader)};
  std::vector<op> claim{op::put(leader, "me", o.lease)};
  std::vector<op> read{op::range(leader)};
  o.first = (co_await c->txn(campaign, claim, read)).value();
  std::vector<op> claim_again{op::put(leader, "you")};
  o.second = (co_await c->txn(campaign, claim_again, read)).value();
  o.leader = (co_await c->get("/leader")).value();
  for (const char* k : {"/d/1", "/d/2", "/d/3"}) (void)(co_await c->put(k, "x")).value();
  std::vector<compare> both{compare::value_is(leader, cmp::equal, "me"), compare::exists("/d/1")};
  std::vector<op> every_kind{op::range_prefix("/d/"), op::del_prefix("/d/"), op::put("/p", "q"), op::range("/p"), op::del(leader)};
  o.mixed = (co_await c->txn(both, every_kind, {})).value();
  o.gone = (co_await c->get_prefix("/d/")).value();
  co_return o;
}

}  // namespace

TEST_CASE("txn runs the success branch when every compare holds, else the failure branch, with per-op results",
          "[etcd]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  etcd::client c(etcd.where(), test::quick());
  const auto o = runtime::sync_wait(branches(&c));
  CHECK(o.first.succeeded);
  REQUIRE(o.first.ranges.size() == 1);
  CHECK(o.first.ranges[0].empty());  // a put has no kvs
  CHECK(o.first.revision > 0);
  CHECK_FALSE(o.second.succeeded);
  CHECK(o.second.revision == o.first.revision);  // nothing changed
  REQUIRE(o.second.ranges.size() == 1);
  REQUIRE(o.second.ranges[0].size() == 1);
  CHECK(o.second.ranges[0][0].value == "me");
  CHECK(o.second.ranges[0][0].lease == o.lease);
  CHECK(o.second.ranges[0][0].mod_revision == o.first.revision);
  REQUIRE(o.leader.kvs.size() == 1);
  CHECK(o.leader.kvs[0].value == "me");

  CHECK(o.mixed.succeeded);
  REQUIRE(o.mixed.ranges.size() == 5);
  REQUIRE(o.mixed.deleted.size() == 5);
  CHECK(o.mixed.ranges[0].size() == 3);  // the range before the delete saw all three
  CHECK(o.mixed.deleted[1] == 3);
  REQUIRE(o.mixed.ranges[3].size() == 1);  // a range sees the put of the same txn
  CHECK(o.mixed.ranges[3][0].value == "q");
  CHECK(o.mixed.deleted[4] == 1);
  CHECK(o.mixed.deleted[0] == 0);
  CHECK(o.gone.kvs.empty());
}
