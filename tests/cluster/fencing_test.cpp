// Fencing, against a real etcd: a leader whose epoch is over (the leader key was created again
// since: another worker leads) can neither reserve checkpoint ids nor publish a checkpoint
// (cluster/src/attempt_link.hpp); the leader of the current epoch can. The netns tests reach this
// through a cut-off leader; here each refused write is made on purpose and its effect checked.

#include "attempt_link.hpp"
#include "attempt_record.hpp"
#include "keys.hpp"

#include <sluice/dataflow/sinks.hpp>
#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/etcd/client.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/sync_wait.hpp>

#include <etcd/etcd_fixture.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace sluice;
namespace cd = sluice::cluster::detail;

namespace {

dataflow::job_builder small_job() {
  dataflow::job_builder job("fenced");
  job.read_lines("read", "/nonexistent/in.txt", 2)
      .write_lines("/nonexistent/out", [](const std::string& line) { return line; });
  return job;
}

// What one leader's link could write: an id reservation and a publication, and what etcd then held.
struct leader_writes {
  bool reserved = false, published = false;
  std::string reserve_error, publish_error;
  std::string pointer, next_id;  // "" if missing
};

struct outcome {
  std::int64_t old_epoch = 0, new_epoch = 0;
  leader_writes stale, current;
};

// The value at `key`, or "" if missing.
runtime::task<std::string> value_of(etcd::client* c, std::string key) {
  io::result<etcd::range_response> r = co_await c->get(std::move(key));
  co_return r && !r->kvs.empty() ? r->kvs[0].value : std::string();
}

runtime::task<std::int64_t> take_leader_key(etcd::client* c, const cd::keys* k) {
  (void)co_await c->del(k->leader());
  std::vector<etcd::compare> missing{etcd::compare::missing(k->leader())};
  std::vector<etcd::op> put{etcd::op::put(k->leader(), "0")};
  io::result<etcd::txn_response> r = co_await c->txn(std::move(missing), std::move(put));
  co_return r && r->succeeded ? r->revision : 0;
}

// A link of attempt `a` (its epoch) reserves ids up to 16 and publishes checkpoint 7.
runtime::task<leader_writes> write_as_leader(etcd::client* c, const dataflow::job_plan* plan, cd::attempt_record a,
                                             cd::link_settings s) {
  leader_writes w;
  cd::attempt_link link(*c, *runtime::executor::current(), *plan, std::move(a), 0, s);
  io::result<void> reserved = co_await link.reserve_ids(16);
  io::result<void> published = co_await link.publish(7);
  w.reserved = static_cast<bool>(reserved);
  w.published = static_cast<bool>(published);
  if (!reserved) w.reserve_error = reserved.error().message();
  if (!published) w.publish_error = published.error().message();
  w.pointer = co_await value_of(c, s.where->pointer());
  w.next_id = co_await value_of(c, s.where->next_id());
  co_await link.stop(!published);
  co_return w;
}

runtime::task<outcome> scenario(etcd::endpoint where) {
  outcome o;
  etcd::client c(where);
  const cd::keys k("fenced");
  dataflow::job_builder job = small_job();
  const dataflow::job_plan plan = dataflow::job_plan::make(job, dataflow::plan_shape{.workers = 2, .executors = 1});
  o.old_epoch = co_await take_leader_key(&c, &k);
  o.new_epoch = co_await take_leader_key(&c, &k);  // another worker leads now
  cd::attempt_record a;
  a.number = 1;
  a.leader = 0;
  a.ports = {"127.0.0.1:1", "127.0.0.1:2"};
  a.member_revisions = {1, 2};
  const cd::link_settings s{&k, 0, io::address::parse("127.0.0.1:0").value(), "fenced", {}};
  a.epoch = o.old_epoch;
  o.stale = co_await write_as_leader(&c, &plan, a, s);
  a.epoch = o.new_epoch;
  o.current = co_await write_as_leader(&c, &plan, a, s);
  co_return o;
}

}  // namespace

TEST_CASE("cluster fencing: a leader of an epoch that is over can neither reserve ids nor publish") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  const outcome o = runtime::sync_wait(scenario(etcd.where()));
  REQUIRE(o.old_epoch > 0);
  REQUIRE(o.new_epoch > o.old_epoch);
  CHECK_FALSE(o.stale.reserved);
  CHECK_FALSE(o.stale.published);
  CHECK_THAT(o.stale.publish_error, Catch::Contains("fenced") && Catch::Contains("checkpoint 7 is not the job's"));
  CHECK_THAT(o.stale.reserve_error, Catch::Contains("no longer the leader of epoch " + std::to_string(o.old_epoch)));
  CHECK(o.stale.pointer.empty());
  CHECK(o.stale.next_id.empty());
  CHECK(o.current.reserved);
  CHECK(o.current.published);
  CHECK(o.current.pointer == "7");
  CHECK(o.current.next_id == "17");
}
