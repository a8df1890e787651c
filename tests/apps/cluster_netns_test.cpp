// One job across hosts, for real: each worker of `sluice wordcount --cluster` and etcd run in
// network namespaces of their own (tests/support/netns.hpp), over TCP through a bridge, and a
// host's cable is pulled mid-run: a partitioned follower, a partitioned leader that comes back
// stale; and etcd stopped mid-job and started again. The published output is compared with a
// one-process run of the same job every time.
//
// Each test waits for an observable moment (a checkpoint published: the pointer key in etcd; an
// attempt started or ended: the workers' logs, at SLUICE_LOG=info) rather than sleeping a fixed
// time, and prints what it measured ("measured: ...", with the log lines' own timestamps).

#include "cluster_support.hpp"
#include "etcd_tripwire.hpp"

#include <sluice/etcd/client.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <support/etcd_server.hpp>
#include <support/netns.hpp>
#include <support/temp_dir.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

using namespace sluice::test;
using namespace std::chrono_literals;

namespace {

using wall = std::chrono::system_clock;

// The corpus size: an eighth in a sanitizer or Debug tree, whose tool runs many times slower (the
// reference run alone would outlast run_sluice's 60 s), and which is still running when disrupted.
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
constexpr unsigned size_divisor = 8;
#else
constexpr unsigned size_divisor = 1;
#endif
std::string lines(unsigned n) { return std::to_string(n / size_divisor); }

// The corpus and its one-process word count.
struct reference_run {
  std::string input, reference;
  reference_run(const temp_dir& dir, unsigned n) : input(dir.file("in.txt")), reference(dir.file("reference")) {
    REQUIRE(run_sluice({"corpus", "--output", input, "--lines", lines(n), "--seed", "12"}).exit_code == 0);
    const tool_run ref = run_sluice({"wordcount", "--input", input, "--output", reference, "--checkpoint-dir",
                                     dir.file("reference-chk"), "--quiet"});
    REQUIRE(ref.exit_code == 0);
  }
};

std::vector<std::string> worker_args(const temp_dir& dir, const std::string& input, const std::string& endpoint,
                                     const std::string& job, unsigned index, const std::string& listen) {
  return {"wordcount", "--input", input, "--output", dir.file("out-" + job), "--checkpoint-dir",
          dir.file("chk-" + job), "--parallelism", "3", "--executors", "1", "--checkpoint-interval-ms", "100",
          "--quiet", "--cluster", endpoint, "--job-name", job, "--workers", "3", "--worker-index",
          std::to_string(index), "--listen", listen};
}

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds within) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// The time stamp of the first log line at or after `from` that contains `text` (runtime/log.hpp
// writes "YYYY-MM-DDTHH:MM:SS.mmmZ level ..." in UTC).
std::optional<wall::time_point> logged_at(const std::string& log, const std::string& text, wall::time_point from = {}) {
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find(text) == std::string::npos || line.size() < 24) continue;
    std::tm tm{};
    int ms = 0;
    if (std::sscanf(line.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                    &tm.tm_min, &tm.tm_sec, &ms) != 7) {
      continue;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    const wall::time_point t = wall::from_time_t(::timegm(&tm)) + std::chrono::milliseconds(ms);
    if (t >= from) return t;
  }
  return std::nullopt;
}

long ms_between(wall::time_point a, std::optional<wall::time_point> b) {
  return b ? static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(*b - a).count()) : -1;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Three worker hosts and an etcd host, on one bridge.
struct netns_cluster {
  netns_hosts net{{"etcd", "w0", "w1", "w2"}};  // first: it outlives every process inside it
  temp_dir dir;
  etcd_server etcd{dir.path(), {.tcp_host = net.address("etcd"), .netns = net.netns("etcd")}};
  reference_run ref;
  std::string job;
  std::vector<std::unique_ptr<tool_process>> workers;
  std::vector<std::string> extra_args;  // for every worker, after the usual ones

  netns_cluster(std::string name, unsigned lines) : ref(dir, lines), job(std::move(name)) { etcd.start(); }
  netns_cluster(const netns_cluster&) = delete;
  netns_cluster& operator=(const netns_cluster&) = delete;
  ~netns_cluster() {
    if (std::getenv("SLUICE_TEST_SHOW_LOGS") != nullptr) std::printf("%s", logs().c_str());  // to read a run
  }

  std::string host(unsigned i) const { return "w" + std::to_string(i); }
  void start(unsigned i) {
    const std::string listen = net.address(host(i)) + ":7000";
    std::vector<std::string> args = worker_args(dir, ref.input, etcd.endpoint(), job, i, listen);
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    auto p = std::make_unique<tool_process>(args,
                                            dir.file(job + "-w" + std::to_string(i) + ".log"), net.netns(host(i)),
                                            std::vector<std::string>{"SLUICE_LOG=info"});
    if (workers.size() <= i) workers.resize(i + 1);
    workers[i] = std::move(p);
  }
  void start_all() {
    for (unsigned i = 0; i < 3; ++i) start(i);
  }

  // etcdctl inside etcd's host; "" when the key is missing or etcd does not answer.
  std::string get(const std::string& key) const {
    const command_run r = run_in_netns(net.netns("etcd"), {"etcdctl", "--endpoints", etcd.endpoint(),
                                                          "--command-timeout=1s", "get", "/sluice/" + job + "/" + key,
                                                          "--print-value-only"});
    std::string v = r.exit_code == 0 ? r.out : "";
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
    return v;
  }
  // A checkpoint published across workers (the pointer key), and the index that leads.
  unsigned wait_for_checkpoint() {
    REQUIRE(eventually([this] { return !get("pointer").empty(); }, 20s));
    const std::string leader = get("leader");
    REQUIRE(!leader.empty());
    return static_cast<unsigned>(std::stoul(leader));
  }

  void expect_all_done() {
    for (std::size_t i = 0; i < workers.size(); ++i) {
      const std::optional<int> code = workers[i]->wait(60s);
      INFO("worker " << i << " did not exit; every log now:\n" << logs());
      REQUIRE(code.has_value());
      CHECK(*code == 0);
    }
    CHECK(published_lines(dir.file("out-" + job)) == published_lines(ref.reference));
  }
  std::string logs() const {
    std::string all;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (workers[i]) all += "--- worker " + std::to_string(i) + ":\n" + workers[i]->log();
    }
    return all;
  }
};

}  // namespace

TEST_CASE("cluster netns: 3 workers on 3 hosts and etcd on a 4th, over TCP, publish exactly what one process does") {
  SLUICE_SKIP_WITHOUT_ETCD();
  SLUICE_SKIP_WITHOUT_NETNS();
  netns_cluster c("hosts", 300000);
  c.start_all();
  c.expect_all_done();
  // They did run as three hosts: each one's data port is its own address.
  for (unsigned i = 0; i < 3; ++i) CHECK_THAT(c.workers[i]->log(), Catch::Contains("data port " + c.net.address(c.host(i))));
}

TEST_CASE("cluster netns: a follower cut off for longer than the lease finds itself expired and rejoins: exact output") {
  SLUICE_SKIP_WITHOUT_ETCD();
  SLUICE_SKIP_WITHOUT_NETNS();
  netns_cluster c("partition", 1000000);
  // Still running at the cut, as the stale-leader test below: the job must outlast the cut's notice.
  c.extra_args = {"--slow-sink-us", "100000"};
  c.start_all();
  const unsigned leader = c.wait_for_checkpoint();
  const unsigned cut = (leader + 1) % 3;
  const unsigned other = (leader + 2) % 3;
  INFO("leader " << leader << ", worker " << cut << " cut off");
  const wall::time_point down = wall::now();
  c.net.unplug(c.host(cut));
  // The others end the attempt (the member key's lease ran out), and the cut-off worker stops its
  // own tasks once it could not renew its lease for a whole TTL.
  const bool noticed = eventually(
      [&] {
        return logged_at(c.workers[leader]->log(), "ended:", down) && logged_at(c.workers[other]->log(), "ended:", down) &&
               logged_at(c.workers[cut]->log(), "lost its place in the job", down);
      },
      15s);
  INFO(c.logs());
  REQUIRE(noticed);
  std::this_thread::sleep_for(500ms);
  const wall::time_point up = wall::now();
  c.net.plug(c.host(cut));
  c.expect_all_done();
  const std::string log = c.workers[cut]->log();
  CHECK(count_of(log, "joined (lease") >= 2);  // it rejoined, with a new lease
  CHECK(logged_at(log, "runs attempt", up).has_value());
  std::printf("measured: partition: the others ended the attempt %ld / %ld ms after the cable was pulled; the cut-off "
              "worker stopped its tasks after %ld ms; cable back after %ld ms; next attempt %ld ms after that, its first "
              "checkpoint %ld ms after that\n",
              ms_between(down, logged_at(c.workers[leader]->log(), "ended:", down)),
              ms_between(down, logged_at(c.workers[other]->log(), "ended:", down)),
              ms_between(down, logged_at(log, "lost its place in the job", down)), ms_between(down, up),
              ms_between(up, logged_at(c.workers[leader]->log(), "runs attempt", up)),
              ms_between(up, logged_at(c.workers[leader]->log(), "completed:", up)) -
                  ms_between(up, logged_at(c.workers[leader]->log(), "runs attempt", up)));
}

// A partition between two workers only: both still reach etcd (and renew their leases), but not
// each other. Their data connections go silent, with no reset; each end gives up on its own after
// the dead-peer timeout (2 TTLs: buffers::transport_options::dead_peer_timeout), which fails the
// attempt. Until the path is back, new attempts fail at the dial; then the job finishes exactly.
TEST_CASE("cluster netns: two workers that no longer reach each other but still reach etcd end the attempt: exact output") {
  SLUICE_SKIP_WITHOUT_ETCD();
  SLUICE_SKIP_WITHOUT_NETNS();
  netns_cluster c("between", 1000000);
  // Still running at the cut, as the stale-leader test below: the job must outlast the cut's notice.
  c.extra_args = {"--slow-sink-us", "100000"};
  c.start_all();
  const unsigned leader = c.wait_for_checkpoint();
  const unsigned a = (leader + 1) % 3;
  const unsigned b = (leader + 2) % 3;
  INFO("leader " << leader << "; workers " << a << " and " << b << " cut from each other");
  const wall::time_point down = wall::now();
  c.net.cut_between(c.host(a), c.host(b));
  const bool noticed = eventually([&] { return logged_at(c.workers[leader]->log(), "ended:", down).has_value(); }, 20s);
  INFO(c.logs());
  REQUIRE(noticed);
  const wall::time_point ended = *logged_at(c.workers[leader]->log(), "ended:", down);
  std::this_thread::sleep_for(500ms);
  c.net.mend_between(c.host(a), c.host(b));
  c.expect_all_done();
  // One of the two cut off noticed its connection fail on its own (the other may see the first
  // fail). A real partition drops packets in the network, and the connection fails with "timed
  // out"; here the blackhole route drops them in the sender's kernel, which reports its route error
  // instead, EINVAL ("Invalid argument"), once the same timeout ran out.
  const auto own_failure = [&](unsigned w) {
    return logged_at(c.workers[w]->log(), "timed out", down) || logged_at(c.workers[w]->log(), "Invalid argument", down);
  };
  CHECK((own_failure(a) || own_failure(b)));
  // No lease was lost: it was the data connections that noticed.
  for (unsigned i = 0; i < 3; ++i) CHECK_FALSE(logged_at(c.workers[i]->log(), "lost its place in the job", down).has_value());
  // Why it ended, as the leader logged it: a connection that timed out, or the worker it failed on.
  const std::string leader_log = c.workers[leader]->log();
  const std::size_t at = leader_log.find("ended:", leader_log.find("runs attempt"));
  const std::string why = leader_log.substr(at, leader_log.find('\n', at) - at);
  std::printf("measured: partition between two workers: the attempt ended %ld ms after the cut (%s)\n",
              ms_between(down, ended), why.c_str());
}

TEST_CASE("cluster netns: a leader cut off is replaced, comes back stale, steps down and rejoins: exact output") {
  SLUICE_SKIP_WITHOUT_ETCD();
  SLUICE_SKIP_WITHOUT_NETNS();
  netns_cluster c("stale", 1000000);
  // Still running when the old leader comes back: the combiner counts 1M lines in a fraction of a
  // second, and without slow sinks the job could end at the cut (then no attempt follows it).
  c.extra_args = {"--slow-sink-us", "100000"};
  c.start_all();
  const unsigned old_leader = c.wait_for_checkpoint();
  INFO("worker " << old_leader << " led, and is cut off");
  const wall::time_point down = wall::now();
  const std::string epoch_before = c.get("leader");
  c.net.unplug(c.host(old_leader));
  // Another worker takes the leader key (a new epoch) while the old one is away.
  std::string now_leads;
  const bool replaced = eventually(
      [&] {
        now_leads = c.get("leader");
        return !now_leads.empty() && now_leads != std::to_string(old_leader);
      },
      15s);
  INFO(c.logs());
  REQUIRE(replaced);
  const unsigned new_leader = static_cast<unsigned>(std::stoul(now_leads));
  REQUIRE(eventually([&] { return logged_at(c.workers[old_leader]->log(), "lost its place in the job", down).has_value(); },
                     10s));
  const wall::time_point up = wall::now();
  c.net.plug(c.host(old_leader));
  c.expect_all_done();
  const std::string log = c.workers[old_leader]->log();
  CHECK(logged_at(c.workers[new_leader]->log(), "leads job", down).has_value());
  // The old leader completed no checkpoint after it was cut off, and followed once back.
  CHECK_FALSE(logged_at(log, "leads job", down).has_value());
  CHECK(logged_at(log, "runs attempt", up).has_value());
  CHECK_THAT(log.substr(log.find("lost its place in the job")), Catch::Contains("leader is worker " + now_leads));
  CHECK(logged_at(log, "it steps down and follows", up).has_value());
  // Nothing it completed after the cut is unknown to the new epoch: a publication whose answer was
  // in flight when the cable went may be answered once it is back (etcd applied it while the old
  // epoch still held), but one sent later is fenced. So every checkpoint it logged as completed is
  // at most the one the new leader's attempt recovers from (the pointer it read).
  const std::string new_log = c.workers[new_leader]->log();
  const std::size_t attempt_at = new_log.find("recovery from checkpoint ", new_log.find("leads job"));
  REQUIRE(attempt_at != std::string::npos);
  const unsigned long allowed = std::stoul(new_log.substr(attempt_at + std::strlen("recovery from checkpoint ")));
  std::istringstream lines_of(log);
  for (std::string line; std::getline(lines_of, line);) {
    const std::size_t at = line.find(" checkpoint ");
    if (at == std::string::npos || line.find(" completed: ") == std::string::npos) continue;
    if (logged_at(line, "completed:", down).has_value()) {
      INFO(line);
      CHECK(std::stoul(line.substr(at + std::strlen(" checkpoint "))) <= allowed);
    }
  }
  std::printf("measured: stale leader: worker %s led %ld ms after the leader's cable was pulled; the old leader stopped "
              "its tasks after %ld ms; cable back after %ld ms; next attempt %ld ms after that, its first checkpoint %ld ms "
              "after that\n",
              now_leads.c_str(), ms_between(down, logged_at(c.workers[new_leader]->log(), "leads job", down)),
              ms_between(down, logged_at(log, "lost its place in the job", down)), ms_between(down, up),
              ms_between(up, logged_at(c.workers[new_leader]->log(), "runs attempt", up)),
              ms_between(up, logged_at(c.workers[new_leader]->log(), "completed:", up)) -
                  ms_between(up, logged_at(c.workers[new_leader]->log(), "runs attempt", up)));
}

namespace {

enum class etcd_outage { short_one, past_the_ttl };

// etcd killed the moment the leader triggers checkpoint 1, started again on its data `for_how_long`
// later.
void run_with_etcd_down(std::chrono::milliseconds for_how_long, etcd_outage kind, const std::string& job) {
  temp_dir dir;
  etcd_server etcd(dir.path());
  etcd.start();
  reference_run ref(dir, 1000000);
  // When the leader writes t/1 (a/1/t/1), every worker runs attempt 1 and the job cannot end before
  // etcd is back: its final checkpoint must be published there. Waiting for "checkpoint 1
  // completed" in the logs instead killed etcd after the job's end in CI (twice): checkpoint 1's
  // barrier can reach the slow sinks behind their lines (the combiner sends them at a checkpoint
  // and at the end of its input), so it completed 3.7 s in, 5 ms before the final one.
  std::atomic<pid_t> etcd_pid = etcd.pid();
  wall::time_point down;
  std::optional<etcd_tripwire> wire;
  wire.emplace(etcd.endpoint(), "/sluice/" + job + "/a/1/", "/t/1", [&etcd_pid, &down] {
    down = wall::now();
    ::kill(etcd_pid.load(), SIGKILL);
  });
  std::vector<std::unique_ptr<tool_process>> workers;
  for (unsigned i = 0; i < 3; ++i) {
    // Running through the outage: the combiner counts 1M lines in a fraction of a second, so the
    // sinks take each of their lines (the vocabulary, about 34 each) 100 ms: 3.4 s more.
    std::vector<std::string> args =
        worker_args(dir, ref.input, etcd.endpoint(), job, i, "127.0.0.1:" + std::to_string(free_port()));
    args.insert(args.end(), {"--slow-sink-us", "100000"});
    workers.push_back(std::make_unique<tool_process>(
        args,
        dir.file(job + "-w" + std::to_string(i) + ".log"), std::string(), std::vector<std::string>{"SLUICE_LOG=info"}));
  }
  const bool fired = eventually([&] { return wire->fired(); }, 20s);
  wire.reset();  // (joins its thread: `down` is read below)
  INFO("worker 0 log:\n" << workers[0]->log());
  REQUIRE(fired);
  etcd.kill();  // (reaps it)
  std::this_thread::sleep_for(for_how_long);
  etcd.start();
  const wall::time_point up = wall::now();
  std::string all;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const std::optional<int> code = workers[i]->wait(60s);
    const std::string log = workers[i]->log();
    all += "--- worker " + std::to_string(i) + ":\n" + log;
    INFO("worker " << i << " log:\n" << log);
    REQUIRE(code.has_value());
    CHECK(*code == 0);
    // Each says what it did: it kept going and kept its lease, or it presumed its lease lost and
    // the job restarted.
    const bool waited = logged_at(log, "the job goes on", down) && logged_at(log, "etcd answers again", down);
    const bool failed_over = logged_at(log, "presumes the lease expired", down) && logged_at(log, "runs attempt", down);
    if (kind == etcd_outage::short_one) {
      CHECK((waited || failed_over));
    } else {
      CHECK(failed_over);  // no renewal for longer than the TTL
      CHECK(logged_at(log, "gave up its old lease", down).has_value());  // a restarted etcd kept it
    }
    std::printf("measured: etcd down %ld ms: worker %zu %s; first complaint %ld ms after the kill, next attempt %ld ms "
                "after etcd was back\n",
                ms_between(down, up), i, failed_over ? "failed over (lease presumed lost)" : "waited (kept its lease)",
                ms_between(down, logged_at(log, "cluster: ", down)), ms_between(up, logged_at(log, "runs attempt", up)));
  }
  if (std::getenv("SLUICE_TEST_SHOW_LOGS") != nullptr) std::printf("%s", all.c_str());
  CHECK(published_lines(dir.file("out-" + job)) == published_lines(ref.reference));
}

}  // namespace

TEST_CASE("cluster: etcd killed mid-job and started again 2 s later: the workers wait or fail over, say which, and the output is exact") {
  SLUICE_SKIP_WITHOUT_ETCD();
  run_with_etcd_down(2s, etcd_outage::short_one, "etcd-down");
}

TEST_CASE("cluster: etcd killed mid-job for longer than the lease TTL: the workers fail over once it is back, and the output is exact") {
  SLUICE_SKIP_WITHOUT_ETCD();
  run_with_etcd_down(4s, etcd_outage::past_the_ttl, "etcd-long");
}

namespace {

struct silent_watch {
  bool opened = false;
  bool failed = false;  // next() failed (rather than waiting on)
  long after_ms = 0;    // after the cut
  std::string why;
};

// Opens a watch, runs `cut` (the path to etcd goes silent), then waits for the watch's next batch.
sluice::runtime::task<silent_watch> watch_through_a_cut(std::string endpoint, std::function<void()> cut) {
  silent_watch out;
  sluice::etcd::client_options o;
  o.dead_peer_timeout = 2000ms;
  sluice::etcd::client c(sluice::etcd::endpoint::parse(endpoint).value(), o);
  sluice::io::result<sluice::etcd::watch> w = co_await c.watch_prefix("/silent/");
  out.opened = static_cast<bool>(w);
  if (!w) co_return out;
  cut();
  const auto cut_at = std::chrono::steady_clock::now();
  auto batch = co_await sluice::runtime::with_timeout(w->next(), 20s);
  out.after_ms = static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - cut_at).count());
  out.failed = batch.has_value() && !*batch;
  if (out.failed) out.why = batch->error().message();
  co_await w->close();
  co_return out;
}

}  // namespace

// The watch that carries an attempt's messages, on a path to etcd that went silent (a partition, a
// NAT that dropped an idle connection: no reset), while other connections may still work: it fails
// within the client's dead-peer timeout, and its owner reopens it (attempt_link::run), instead of
// waiting forever for messages (a trigger, the final `f`) that etcd holds.
TEST_CASE("cluster netns: a watch on a path to etcd that went silent fails within the dead-peer timeout") {
  SLUICE_SKIP_WITHOUT_ETCD();
  SLUICE_SKIP_WITHOUT_NETNS();
  netns_hosts net{{"etcd", "client"}};
  temp_dir dir;
  etcd_server etcd{dir.path(), {.tcp_host = net.address("etcd"), .netns = net.netns("etcd")}};
  etcd.start();
  silent_watch outcome;
  std::thread client([&] {  // a thread inside the client host (setns moves only the calling thread)
    const int fd = open_netns(net.netns("client"));
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) return;
    ::close(fd);
    outcome = sluice::runtime::sync_wait(watch_through_a_cut(etcd.endpoint(), [&] { net.cut_between("client", "etcd"); }));
  });
  client.join();
  REQUIRE(outcome.opened);
  INFO("after " << outcome.after_ms << " ms: " << outcome.why);
  CHECK(outcome.failed);
  CHECK(outcome.after_ms < 8000);
  std::printf("measured: a watch on a silent path failed %ld ms after the cut (dead-peer timeout 2000 ms): %s\n",
              outcome.after_ms, outcome.why.c_str());
}
