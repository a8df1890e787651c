// The transport's data port faces a network (hello.hpp, tcp_transport.hpp): it binds only the address
// given; peers with a wrong secret, job or epoch are refused with the reason, logged once and counted;
// dials retry until the peer is up (or connect_timeout); two workers that dial each other at once end
// on one connection; and a flood of idle and hostile connections does not stop a real channel.
#include <sluice/buffers/hello.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/fd_limit.hpp>
#include <support/temp_dir.hpp>

#include "channel_fixture.hpp"
#include "log_capture.hpp"
#include "tcp_fixture.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace sluice::test::channels;
using sluice::test::raise_fd_limit;
using namespace sluice::test::tcp;
using sluice::test::count_lines;
using sluice::test::stderr_capture;

namespace {

constexpr std::uint64_t partition_id = 7;
constexpr auto stall = std::chrono::seconds(10);

std::vector<std::byte> key(char c) { return std::vector<std::byte>(32, static_cast<std::byte>(c)); }

transport_options worker(const char* node, std::uint64_t epoch = 7) {
  transport_options o;
  o.job_name = "wordcount";
  o.epoch = epoch;
  o.node_id = node;
  o.secret = key('k');
  return o;
}
fake_identity fake(std::string job, std::uint64_t epoch, std::string node, std::vector<std::byte> secret) {
  return fake_identity{std::move(job), epoch, std::move(node), std::move(secret)};
}

task<void> wait_until(const tcp_transport* t, std::uint64_t rejected) {
  for (int i = 0; i < 5000 && t->stats().rejected.total() < rejected; ++i) (void)co_await sleep_for(std::chrono::milliseconds(1));
}

// --- binding -------------------------------------------------------------------------------------

struct bind_report {
  std::string local;
  bool other_address_refused = false;
};
task<void> bind_body(bind_report* out) {
  std::unique_ptr<tcp_transport> t = co_await start_transport({});
  out->local = t->local_address().to_string();
  auto other = co_await sluice::io::tcp_stream::connect(address::parse("127.0.0.2:0").value().with_port(t->local_address().port()));
  out->other_address_refused = !other && other.error().code() == std::errc::connection_refused;
  co_await t->close();
}

// --- refusals at the accepting side ----------------------------------------------------------------

struct refusal_case {
  const char* name;
  fake_identity who;
  hello_refusal seen_by_peer;  // the fake's own verdict
  bool peer_retries;           // would the fake, a dialer, try again
};

std::vector<refusal_case> refusal_cases() {
  return {
      {"a wrong secret", fake("wordcount", 7, "node-c", key('x')), hello_refusal::authentication, false},
      {"no secret", fake("wordcount", 7, "node-d", {}), hello_refusal::authentication, false},
      {"a wrong job", fake("other", 7, "node-e", key('k')), hello_refusal::wrong_job, false},
      {"a stale epoch", fake("wordcount", 5, "node-f", key('k')), hello_refusal::future_epoch, false},
      {"a future epoch", fake("wordcount", 8, "node-g", key('k')), hello_refusal::stale_epoch, true},
      {"this node's own id", fake("wordcount", 7, "node-a", key('k')), hello_refusal::same_node, false},
  };
}

struct refusals_report {
  std::vector<hello_outcome> outcomes;
  std::vector<std::uint16_t> ports;  // each fake's local port
  hello_outcome good;
  std::uint16_t garbage_port = 0;
  transport_stats stats;
};

task<void> refusals_body(refusals_report* out) {
  std::unique_ptr<tcp_transport> t = co_await start_transport(worker("node-a"));
  std::vector<refusal_case> cases = refusal_cases();
  for (refusal_case& c : cases) {
    fake_peer p = co_await dial_peer(t->local_address(), &c.who);
    out->ports.push_back(p.stream.local_address().value().port());
    out->outcomes.push_back(p.hello);
    (void)co_await p.stream.close();
  }
  // Garbage: another protocol.
  auto raw = co_await sluice::io::tcp_stream::connect(t->local_address());
  sluice::io::tcp_stream garbage = std::move(raw).value();
  out->garbage_port = garbage.local_address().value().port();
  const std::string request = "GET / HTTP/1.1\r\nHost: sluice\r\n\r\n";
  (void)co_await garbage.send_all(std::as_bytes(std::span(request)));
  std::vector<std::byte> sink(256);
  for (;;) {
    auto got = co_await garbage.recv(sink);
    if (!got || got.value() == 0) break;
  }
  (void)co_await garbage.close();
  co_await wait_until(t.get(), cases.size() + 1);
  const fake_identity good = fake("wordcount", 7, "node-b", key('k'));
  fake_peer p = co_await dial_peer(t->local_address(), &good);
  out->good = p.hello;
  out->stats = t->stats();
  (void)co_await p.stream.close();
  co_await t->close();
}

// --- the dialing side ------------------------------------------------------------------------------

struct dial_report {
  std::string failure;
  bool finished = false;
  transport_stats stats;
};

// A fake process listening at `listener` whose hellos present `epochs` in turn, one connection each;
// on the connection that gets through it refuses the channel (a cancel), which proves it got there.
task<void> fake_listener(sluice::io::tcp_listener* listener, std::vector<std::uint64_t> epochs) {
  for (std::uint64_t epoch : epochs) {
    const fake_identity who = fake("wordcount", epoch, "node-z", key('k'));
    fake_peer p = co_await accept_peer(listener, &who);
    if (!p.hello.ok) continue;
    peer_frame request = co_await p.next_control();
    if (!request.ended) co_await p.send(bytes_of(encode_cancel(request.header.channel_id, 0)));
    co_return;
  }
}

task<void> dial_body(network_memory* memory, std::vector<std::uint64_t> epochs, transport_options options, bool listen,
                     dial_report* out) {
  auto listening = sluice::io::tcp_listener::listen(address::loopback_v4());
  sluice::io::tcp_listener listener = std::move(listening).value();
  const address target = listener.local_address();
  if (!listen) (void)co_await listener.close();  // nothing listens there any more
  std::unique_ptr<tcp_transport> t = co_await start_transport(options);
  receiver_side r(memory->pool(0), 1, 0);
  remote_input& in = t->open_input(target, partition_id, 0, r.gate, 0);
  r.pump.connect(0, in);
  receive_report report;
  std::vector<task<void>> jobs;
  if (listen) jobs.push_back(fake_listener(&listener, std::move(epochs)));
  jobs.push_back(run_receiver(&r, &report));
  out->finished = co_await with_timeout(join_all(std::move(jobs)), stall);
  out->failure = r.gate.failure(0);
  out->stats = t->stats();
  co_await t->close();
  (void)co_await in.wait_closed();
  if (listen) (void)co_await listener.close();
}

// A worker whose peer starts later, on a port known in advance.
struct late_report {
  bool finished = false;
  receive_report report;
  transport_stats stats;
};
task<void> late_peer_body(network_memory* memory, late_report* out) {
  auto reserved = sluice::io::tcp_listener::listen(address::loopback_v4());
  const address target = reserved.value().local_address();
  (void)co_await reserved.value().close();
  transport_options receiving_options = worker("node-r");
  std::unique_ptr<tcp_transport> receiving = co_await start_transport(receiving_options);
  receiver_side r(memory->pool(0), 2, 4);
  std::vector<remote_input*> inputs;
  for (std::uint32_t c = 0; c < 2; ++c) {
    remote_input& in = receiving->open_input(target, partition_id, c, r.gate, c);
    r.pump.connect(c, in);
    inputs.push_back(&in);
  }
  const auto later = [](address at, network_memory* m, receive_report* rep, event* received) -> task<void> {
    (void)co_await sleep_for(std::chrono::milliseconds(300));  // the other worker is still starting
    auto started = co_await tcp_transport::start(at, worker("node-s"));
    std::unique_ptr<tcp_transport> sending = std::move(started).value();
    sender_side s(m->pool(0), 2, 16, std::chrono::milliseconds(1));
    sending->serve_partition(partition_id, s.partition);
    co_await run_senders(&s, 20'000, rep);
    (void)co_await received->wait();  // the receiver has it all: the channels are over
    co_await sending->close();
    for (int i = 0; i < 1000 && s.pool.in_use() > 0; ++i) co_await yield();
  };
  const auto receive = [](receiver_side* rs, receive_report* rep, std::vector<remote_input*>* ins,
                           event* received) -> task<void> {
    co_await run_receiver(rs, rep);
    for (remote_input* in : *ins) (void)co_await in->wait_closed();  // the cancel handshakes are over
    received->set();
  };
  event received;
  std::vector<task<void>> jobs;
  jobs.push_back(later(target, memory, &out->report, &received));
  jobs.push_back(receive(&r, &out->report, &inputs, &received));
  out->finished = co_await with_timeout(join_all(std::move(jobs)), stall);
  out->stats = receiving->stats();
  co_await receiving->close();
  for (remote_input* in : inputs) (void)co_await in->wait_closed();
}

// --- two workers that dial each other at once --------------------------------------------------------

struct crossing_report {
  bool finished = false;
  receive_report a_received, b_received;
  std::size_t a_connections = 0, b_connections = 0;
  transport_stats a_stats, b_stats;
};

struct worker_side {
  std::unique_ptr<tcp_transport> transport;
  std::unique_ptr<sender_side> sender;
  std::unique_ptr<receiver_side> receiver;
  std::vector<remote_input*> inputs;
};

task<void> crossing_body(network_memory* memory, crossing_report* out) {
  worker_side a, b;
  a.transport = co_await start_transport(worker("node-a"));
  b.transport = co_await start_transport(worker("node-b"));
  for (worker_side* w : {&a, &b}) {
    w->sender = std::make_unique<sender_side>(memory->pool(0), 2, 16, std::chrono::milliseconds(1));
    w->transport->serve_partition(partition_id, w->sender->partition);
    w->receiver = std::make_unique<receiver_side>(memory->pool(0), 2, 4);
  }
  // In one turn: each opens its inputs from the other before either connection exists.
  for (auto [w, peer] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    for (std::uint32_t c = 0; c < 2; ++c) {
      remote_input& in = w->transport->open_input(peer->transport->local_address(), partition_id, c, w->receiver->gate, c);
      w->receiver->pump.connect(c, in);
      w->inputs.push_back(&in);
    }
  }
  receive_report a_sent, b_sent;
  std::vector<task<void>> jobs;
  jobs.push_back(run_senders(a.sender.get(), 20'000, &a_sent));
  jobs.push_back(run_senders(b.sender.get(), 20'000, &b_sent));
  jobs.push_back(run_receiver(a.receiver.get(), &out->a_received));
  jobs.push_back(run_receiver(b.receiver.get(), &out->b_received));
  out->finished = co_await with_timeout(join_all(std::move(jobs)), stall);
  for (worker_side* w : {&a, &b}) {
    for (remote_input* in : w->inputs) (void)co_await with_timeout(in->wait_closed(), stall);
  }
  out->a_connections = a.transport->connections();
  out->b_connections = b.transport->connections();
  out->a_stats = a.transport->stats();
  out->b_stats = b.transport->stats();
  co_await a.transport->close();
  co_await b.transport->close();
  for (int i = 0; i < 1000 && (a.sender->pool.in_use() > 0 || b.sender->pool.in_use() > 0); ++i) co_await yield();
}

}  // namespace

TEST_CASE("the data port binds only the address it is given", "[tcp][hello]") {
  bind_report r;
  sync_wait(bind_body(&r));
  CHECK(r.local.rfind("127.0.0.1:", 0) == 0);
  CHECK(r.other_address_refused);  // 127.0.0.2 is loopback too, but nothing listens there
}

TEST_CASE("peers with a wrong secret, job, epoch or node id are refused with the reason, logged once and counted",
          "[tcp][hello]") {
  sluice::test::temp_dir dir;
  refusals_report r;
  std::string log;
  {
    stderr_capture capture(dir.file("log"));
    sync_wait(refusals_body(&r));
    log = capture.stop();
  }
  const std::vector<refusal_case> cases = refusal_cases();
  REQUIRE(r.outcomes.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].name << ": " << r.outcomes[i].reason);
    CHECK_FALSE(r.outcomes[i].ok);
    CHECK(r.outcomes[i].refusal == cases[i].seen_by_peer);
    CHECK(r.outcomes[i].retry == cases[i].peer_retries);
    const std::string refused = "connection from 127.0.0.1:" + std::to_string(r.ports[i]) + " refused";
    CHECK(count_lines(log, refused) == 1);
  }
  CHECK(count_lines(log, "connection from 127.0.0.1:" + std::to_string(r.ports[3]) +
                             " refused: stale epoch 5 (this job is at epoch 7)") == 1);
  CHECK(count_lines(log, "connection from 127.0.0.1:" + std::to_string(r.garbage_port) +
                             " refused: not a sluice hello: bad magic 'GET '") == 1);
  CHECK(r.good.ok);
  CHECK(r.stats.rejected.authentication == 2);
  CHECK(r.stats.rejected.wrong_job == 1);
  CHECK(r.stats.rejected.stale_epoch == 1);
  CHECK(r.stats.rejected.future_epoch == 1);
  CHECK(r.stats.rejected.same_node == 1);
  CHECK(r.stats.rejected.malformed == 1);
  CHECK(r.stats.rejected.total() == cases.size() + 1);
  CHECK(r.stats.connections_failed == 0);
}

TEST_CASE("a dialer that finds its peer at a newer epoch fails its channels at once: it is the stale one",
          "[tcp][hello][dial]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  dial_report r;
  sync_wait(dial_body(&memory, {9}, worker("node-a"), true, &r));
  REQUIRE(r.finished);
  INFO(r.failure);
  CHECK(r.failure.find("refused: future epoch 9 (this job is at epoch 7)") != std::string::npos);
  CHECK(r.stats.dial_retries == 0);
  CHECK(r.stats.rejected.future_epoch == 1);
}

TEST_CASE("a dialer whose peer is not at this epoch yet retries until it is", "[tcp][hello][dial]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  dial_report r;
  sync_wait(dial_body(&memory, {6, 6, 7}, worker("node-a"), true, &r));
  REQUIRE(r.finished);
  INFO(r.failure);
  CHECK(r.failure.find("refused channel") != std::string::npos);  // the peer at epoch 7 answered
  CHECK(r.stats.dial_retries == 2);
  CHECK(r.stats.rejected.stale_epoch == 0);  // retried, not refused
}

TEST_CASE("a dialer gives up after connect_timeout and names the last error", "[tcp][hello][dial]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  dial_report r;
  transport_options o = worker("node-a");
  o.connect_timeout = std::chrono::milliseconds(300);
  sync_wait(dial_body(&memory, {}, o, false, &r));
  REQUIRE(r.finished);
  INFO(r.failure);
  CHECK(r.failure.find("could not connect within 300 ms") != std::string::npos);
  CHECK(r.failure.find("Connection refused") != std::string::npos);
  CHECK(r.stats.dial_retries >= 2);
}

TEST_CASE("a worker whose peer starts later keeps dialing, then its channels carry everything", "[tcp][hello][dial]") {
  network_memory memory(16 << 20, 32 << 10, 1);
  late_report r;
  sync_wait(late_peer_body(&memory, &r));
  REQUIRE(r.finished);
  CHECK(r.report.error.empty());
  CHECK(r.report.records == 20'000);
  CHECK(r.stats.dial_retries >= 1);
  CHECK(r.stats.connections_failed == 0);
}

TEST_CASE("two workers that dial each other at once settle on one connection and their channels ride it",
          "[tcp][hello][dial]") {
  network_memory memory(32 << 20, 32 << 10, 1);
  crossing_report r;
  sync_wait(crossing_body(&memory, &r));
  REQUIRE(r.finished);
  CHECK(r.a_received.error.empty());
  CHECK(r.b_received.error.empty());
  CHECK(r.a_received.records == 20'000);
  CHECK(r.b_received.records == 20'000);
  CHECK(r.a_connections == 1);
  CHECK(r.b_connections == 1);
  CHECK(r.a_stats.duplicates_closed + r.b_stats.duplicates_closed >= 1);
  CHECK(r.a_stats.connections_failed == 0);
  CHECK(r.b_stats.connections_failed == 0);
  CHECK(r.a_stats.recent_failures.empty());
  CHECK(r.b_stats.recent_failures.empty());
}

// --- a flood of idle and hostile connections while a real channel moves data ----------------------

namespace {

constexpr std::size_t idle_connections = 2000;

struct flood_log {
  bool moving = true;                   // the good channel kept moving at each step
  std::vector<std::uint64_t> records;   // the good channel's records at each step
  std::size_t max_connections = 0;      // the attacked transport's, sampled during the flood
  std::size_t opened = 0;               // idle connections the attacker got established
  transport_stats attacked;
  receive_report report;
  std::vector<std::uint16_t> hostile_ports;  // garbage, wrong secret, stale epoch
};

task<void> hostile_peers(address target, flood_log* log) {
  auto raw = co_await sluice::io::tcp_stream::connect(target);
  sluice::io::tcp_stream garbage = std::move(raw).value();
  log->hostile_ports.push_back(garbage.local_address().value().port());
  std::vector<std::byte> noise(4096, std::byte{0x5a});
  (void)co_await garbage.send_all(noise);
  std::vector<std::byte> sink(256);
  for (;;) {
    auto got = co_await garbage.recv(sink);
    if (!got || got.value() == 0) break;
  }
  (void)co_await garbage.close();
  const fake_identity wrong_secret = fake("wordcount", 7, "node-x", key('x'));
  fake_peer a = co_await dial_peer(target, &wrong_secret);
  log->hostile_ports.push_back(a.stream.local_address().value().port());
  (void)co_await a.stream.close();
  const fake_identity stale = fake("wordcount", 3, "node-y", key('k'));
  fake_peer b = co_await dial_peer(target, &stale);
  log->hostile_ports.push_back(b.stream.local_address().value().port());
  (void)co_await b.stream.close();
}

task<void> flood_body(network_memory* memory, flood_log* log) {
  transport_options attacked_options = worker("node-s");
  attacked_options.hello_timeout = std::chrono::milliseconds(500);
  std::unique_ptr<tcp_transport> sending = co_await start_transport(attacked_options);
  std::unique_ptr<tcp_transport> receiving = co_await start_transport(worker("node-r"));
  sender_side s(memory->pool(0), 2, 24, std::chrono::milliseconds(1));
  sending->serve_partition(partition_id, s.partition);
  receiver_side r(memory->pool(0), 2, 4);
  std::vector<remote_input*> inputs;
  for (std::uint32_t c = 0; c < 2; ++c) {
    remote_input& in = receiving->open_input(sending->local_address(), partition_id, c, r.gate, c);
    r.pump.connect(c, in);
    inputs.push_back(&in);
  }
  constexpr std::uint64_t records = 200'000;
  constexpr std::uint64_t step = 20'000;
  pacing pace;
  std::stop_source stop;
  const auto attack = [](tcp_transport* target, const receive_report* rep, pacing* p, flood_log* l,
                         std::stop_source* st) -> task<void> {
    const auto advance = [](pacing* pc, std::uint64_t to) -> task<bool> {
      co_await allow(pc, to);
      const bool reached = co_await with_timeout(wait_reached(pc), stall);
      co_return reached;
    };
    l->moving = co_await advance(p, step);
    l->records.push_back(rep->records);
    // 1. Hostile peers, each refused with its reason.
    co_await hostile_peers(target->local_address(), l);
    {
      const bool moved = co_await advance(p, rep->records + step);
      l->moving = l->moving && moved;
    }
    l->records.push_back(rep->records);
    // 2. Idle connections that never say hello: at most max_unauthenticated_per_source are held (they
    //    all come from 127.0.0.1), the rest closed.
    std::vector<sluice::io::tcp_stream> idle;
    for (std::size_t i = 0; i < idle_connections; ++i) {
      auto c = co_await sluice::io::tcp_stream::connect(target->local_address());
      if (c) idle.push_back(std::move(c).value());
      if (i % 100 == 0) l->max_connections = std::max(l->max_connections, target->connections());
    }
    l->opened = idle.size();
    l->max_connections = std::max(l->max_connections, target->connections());
    // The real channel moves while the held ones wait for their hello.
    {
      const bool moved = co_await advance(p, rep->records + step);
      l->moving = l->moving && moved;
    }
    l->records.push_back(rep->records);
    l->max_connections = std::max(l->max_connections, target->connections());
    // 3. The held ones time out (hello_timeout, 500 ms); the channel still moves.
    (void)co_await sleep_for(std::chrono::milliseconds(800));
    {
      const bool moved = co_await advance(p, rep->records + step);
      l->moving = l->moving && moved;
    }
    l->records.push_back(rep->records);
    for (auto& c : idle) (void)co_await c.close();
    const bool ended = co_await advance(p, UINT64_MAX);
    if (!ended) st->request_stop();
  };
  co_await when_all(with_stop_token(run_senders(&s, records, &log->report), stop.get_token()),
                    with_stop_token(run_receiver(&r, &log->report, &pace), stop.get_token()),
                    attack(sending.get(), &log->report, &pace, log, &stop));
  for (remote_input* in : inputs) (void)co_await with_timeout(in->wait_closed(), stall);
  log->attacked = sending->stats();
  co_await receiving->close();
  co_await sending->close();
  for (int i = 0; i < 1000 && s.pool.in_use() > 0; ++i) co_await yield();
}

}  // namespace

TEST_CASE("2000 idle connections, garbage, a wrong secret and a stale epoch do not stop a real channel",
          "[tcp][hello][flood]") {
  const std::string limited = raise_fd_limit(idle_connections + 512);
  if (!limited.empty()) {
    WARN("skipped: " << limited);
    return;
  }
  sluice::test::temp_dir dir;
  network_memory memory(32 << 20, 32 << 10, 1);
  flood_log log;
  std::string text;
  {
    stderr_capture capture(dir.file("log"));
    sync_wait(flood_body(&memory, &log));
    text = capture.stop();
  }
  CHECK(log.moving);
  CHECK(log.report.error.empty());
  CHECK(log.report.records == 200'000);
  for (std::size_t i = 1; i < log.records.size(); ++i) CHECK(log.records[i] > log.records[i - 1]);
  CHECK(log.opened == idle_connections);
  const transport_options defaults;
  // Bounded: at most max_unauthenticated_per_source connections in their hello (plus the real one) at
  // any time: they all come from one address.
  CHECK(log.attacked.unauthenticated_peak <= defaults.max_unauthenticated_per_source);
  CHECK(log.max_connections <= defaults.max_unauthenticated + 1);
  // Each idle connection was either closed at once or timed out in its hello (a slow run frees
  // slots during the flood, so how many of each depends on the speed, their sum does not).
  CHECK(log.attacked.rejected.over_capacity + log.attacked.rejected.timeout == idle_connections);
  CHECK(log.attacked.rejected.over_capacity >= 1);
  CHECK(log.attacked.rejected.timeout >= 1);
  CHECK(log.attacked.rejected.malformed == 1);
  CHECK(log.attacked.rejected.authentication == 1);
  CHECK(log.attacked.rejected.stale_epoch == 1);
  CHECK(log.attacked.unauthenticated == 0);
  REQUIRE(log.hostile_ports.size() == 3);
  for (std::uint16_t port : log.hostile_ports) {
    CHECK(count_lines(text, "connection from 127.0.0.1:" + std::to_string(port) + " refused") == 1);
  }
  // The flood itself is logged in a few lines (refusal_log_lines per reason, then a summary line
  // counting the rest), not one per connection.
  CHECK(count_lines(text, "refused") <= 2 * defaults.refusal_log_lines + 3 + 2);
  CHECK(count_lines(text, "more connection(s) refused (over-capacity)") == 1);
}
