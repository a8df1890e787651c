// The etcd_server fixture runs a cluster too: members sharing one directory, peers on unix sockets.

#include "etcd_fixture.hpp"

#include <sluice/runtime/sync_wait.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace sluice;

namespace {

runtime::task<std::vector<std::string>> across_members(std::vector<etcd::client*> clients) {
  std::vector<std::string> seen;
  (void)(co_await clients[0]->put("/k", "written on n1")).value();
  for (auto* c : clients) {
    const auto r = (co_await c->get("/k")).value();  // a linearizable read, from each member
    seen.push_back(r.kvs.empty() ? std::string("<missing>") : r.kvs[0].value);
    seen.push_back(std::to_string((co_await c->status()).value().leader));
  }
  co_return seen;
}

}  // namespace

TEST_CASE("three members sharing one directory form a cluster over unix peer sockets", "[etcd][cluster]") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::temp_dir dir;
  const std::vector<std::string> names = {"n1", "n2", "n3"};
  std::vector<std::unique_ptr<test::etcd_server>> members;
  for (const auto& n : names) {
    members.push_back(std::make_unique<test::etcd_server>(
        dir.path(), test::etcd_server_options{.name = n, .initial_cluster = test::cluster_string(names)}));
  }
  for (auto& m : members) m->launch();
  for (auto& m : members) m->wait_until_healthy();
  std::vector<std::unique_ptr<etcd::client>> owned;
  std::vector<etcd::client*> clients;
  for (auto& m : members) {
    owned.push_back(std::make_unique<etcd::client>(etcd::endpoint::parse(m->endpoint()).value(), test::quick()));
    clients.push_back(owned.back().get());
  }
  const auto seen = runtime::sync_wait(across_members(clients));
  REQUIRE(seen.size() == 6);
  for (int i = 0; i < 3; ++i) CHECK(seen[2 * i] == "written on n1");
  CHECK(seen[1] != "0");
  CHECK(seen[3] == seen[1]);  // one leader, as every member sees it
  CHECK(seen[5] == seen[1]);
}
