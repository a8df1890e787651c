// How an attempt ends on a worker when another one leaves it (cluster/src/attempt_link.hpp), against
// a real etcd: a worker's left/ with no done/ before it ends the attempt here, with the reason it
// wrote; a worker that ended the job in the attempt (done/, then left/) does not. A worker whose
// attempt failed before it had any data connection (its data port's bind, say) drops its unsent
// F/, so its left/ is all the others are sure to see: without this they wait for it forever.

#include "attempt_link.hpp"
#include "attempt_record.hpp"
#include "keys.hpp"

#include <sluice/dataflow/job.hpp>
#include <sluice/dataflow/job_plan.hpp>
#include <sluice/dataflow/sinks.hpp>
#include <sluice/etcd/client.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <etcd/etcd_fixture.hpp>

#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

using namespace sluice;
namespace cd = sluice::cluster::detail;

namespace {

dataflow::job_builder small_job() {
  dataflow::job_builder job("leaving");
  job.read_lines("read", "/nonexistent/in.txt", 3)
      .write_lines("/nonexistent/out", [](const std::string& line) { return line; });
  return job;
}

struct message {
  std::string suffix, value;  // under a/<attempt>/
};

// Worker 0's link of attempt 1 (it leads) watches while `messages` are written, in order; what its
// ended() says within 2 s (nullopt: the attempt did not end).
runtime::task<std::optional<std::string>> watch_while(etcd::endpoint where, std::string job_name,
                                                      std::vector<message> messages) {
  etcd::client c(where);
  const cd::keys k(job_name);
  dataflow::job_builder job = small_job();
  const dataflow::job_plan plan = dataflow::job_plan::make(job, dataflow::plan_shape{.workers = 3, .executors = 1});
  io::result<etcd::range_response> now = co_await c.get(k.leader());
  cd::attempt_record a;
  a.number = 1;
  a.leader = 0;
  a.epoch = 1;
  a.ports = {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"};
  a.member_revisions = {1, 2, 3};
  const cd::link_settings s{&k, 0, io::address::parse("127.0.0.1:0").value(), job_name, {}};
  cd::attempt_link link(c, *runtime::executor::current(), plan, a, now ? now->revision + 1 : 0, s);
  runtime::scope watching;
  watching.spawn(link.run());
  for (const message& m : messages) (void)co_await c.put(k.messages(1) + m.suffix, m.value);
  std::optional<std::string> why = co_await runtime::with_timeout(link.ended(), std::chrono::milliseconds(2000));
  co_await link.stop(false);
  watching.request_stop();
  co_await watching.join();
  co_return why;
}

}  // namespace

TEST_CASE("cluster attempt: a worker that leaves it without a word ends it on the others, with its reason, but one that ended the job in it does not") {
  SLUICE_SKIP_WITHOUT_ETCD();
  test::running_etcd etcd;
  const std::optional<std::string> failed = runtime::sync_wait(
      watch_while(etcd.where(), "left-failed", {{"left/2", "channels: bind 127.0.0.1:3: Address already in use"}}));
  REQUIRE(failed.has_value());
  CHECK(*failed == "worker 2 left attempt 1: channels: bind 127.0.0.1:3: Address already in use");

  const std::optional<std::string> quiet = runtime::sync_wait(watch_while(etcd.where(), "left-quiet", {{"left/1", ""}}));
  REQUIRE(quiet.has_value());
  CHECK(*quiet == "worker 1 left attempt 1");

  // done/ first: its tasks ended the job here; the attempt goes on for the others' ends.
  const std::optional<std::string> done =
      runtime::sync_wait(watch_while(etcd.where(), "left-done", {{"done/1", "5"}, {"left/1", ""}, {"done/2", "6"}, {"left/2", ""}}));
  CHECK_FALSE(done.has_value());

  // Its own left/ (a passed-over attempt, written again) is not another worker's.
  const std::optional<std::string> own = runtime::sync_wait(watch_while(etcd.where(), "left-own", {{"left/0", ""}}));
  CHECK_FALSE(own.has_value());
}
