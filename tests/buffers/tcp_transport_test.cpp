// Remote channels over loopback TCP (tcp_transport.hpp): the credit protocol end to end, faults
// that close one connection only (scenario 22), and peers that go away.
// The bodies run on engine threads, where Catch2 must not be used: they record what they see and
// the tests assert on it afterwards; a step that cannot go on throws (io::result::value()), and
// block_on rethrows that on the test's thread.
#include <sluice/buffers/crc32c.hpp>
#include <sluice/buffers/frame.hpp>
#include <sluice/buffers/tcp_transport.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/run_on.hpp>
#include <support/sanitizers.hpp>

#include "channel_fixture.hpp"
#include "tcp_fixture.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

using namespace sluice::buffers;
using namespace sluice::runtime;
using namespace sluice::test::channels;
using namespace sluice::test::tcp;
using sluice::io::address;
using sluice::test::run_on;

namespace {

constexpr std::uint64_t partition_id = 7;

task<void> close_transport(tcp_transport* t) { co_await t->close(); }

task<void> serve(tcp_transport* t, sender_side* s) {
  t->serve_partition(partition_id, s->partition);
  co_return;
}

task<void> open_inputs(tcp_transport* t, address peer, receiver_side* r, std::vector<remote_input*>* inputs) {
  for (std::uint32_t c = 0; c < r->gate.channels(); ++c) {
    remote_input& in = t->open_input(peer, partition_id, c, r->gate, c);
    r->pump.connect(c, in);
    inputs->push_back(&in);
  }
  co_return;
}

task<void> wait_inputs_closed(std::vector<remote_input*>* inputs, std::size_t* closed) {
  for (remote_input* in : *inputs) {
    const bool ok = co_await in->wait_closed();
    if (ok) ++*closed;
  }
}

struct transports {
  std::unique_ptr<tcp_transport> sending;
  std::unique_ptr<tcp_transport> receiving;
};

struct tcp_report {
  receive_report report;
  std::size_t inputs = 0;
  std::size_t inputs_closed = 0;  // inputs whose wait_closed() said so
  std::size_t connections = 0;    // the receiving transport's, after the transfer
};

void check_tcp_ends(const tcp_report& r) {
  check_ends(r.report);
  CHECK(r.inputs_closed == r.inputs);
  CHECK(r.connections == 1);  // one connection carried every channel
}

// Partition on `a` served by a transport homed on `home_a`; gate on `b` fed by a transport homed on
// `home_b`. The transports are handed back to be destroyed after the engine stopped.
task<tcp_report> tcp_transfer(executor* a, executor* home_a, executor* b, executor* home_b,
                              network_memory* memory, std::size_t channels, std::uint64_t records,
                              std::chrono::milliseconds flush, transports* keep) {
  keep->sending = co_await run_on(home_a, start_transport({}));
  keep->receiving = co_await run_on(home_b, start_transport({}));
  std::unique_ptr<sender_side> s = co_await run_on(a, make_sender(&memory->pool(0), channels, 24, flush));
  co_await run_on(a, serve(keep->sending.get(), s.get()));
  std::unique_ptr<receiver_side> r = co_await run_on(b, make_receiver(&memory->pool(1), channels, 8));
  std::vector<remote_input*> inputs;
  co_await run_on(b, open_inputs(keep->receiving.get(), keep->sending->local_address(), r.get(), &inputs));
  tcp_report out;
  out.inputs = inputs.size();
  co_await when_all(run_on(a, run_senders(s.get(), records, &out.report)),
                    run_on(b, run_receiver(r.get(), &out.report)));
  co_await run_on(b, wait_inputs_closed(&inputs, &out.inputs_closed));
  co_await run_on(b, destroy_receiver(std::move(r), &out.report));
  co_await run_on(a, destroy_sender(std::move(s), &out.report));
  out.connections = keep->receiving->connections();
  co_await run_on(home_b, close_transport(keep->receiving.get()));
  co_await run_on(home_a, close_transport(keep->sending.get()));
  co_return out;
}

}  // namespace

TEST_CASE("remote channels over loopback carry 10 million records, none lost, duplicated or reordered",
          "[tcp][channel]") {
  constexpr std::uint64_t records = sluice::test::scaled_for_tsan(10'000'000);
  transports keep;  // outlives the engine
  engine eng({.executors = 2, .handle_signals = false});
  network_memory memory(64 << 20, 32 << 10, 2);
  const tcp_report r = eng.block_on(tcp_transfer(&eng.at(0), &eng.at(0), &eng.at(1), &eng.at(1), &memory, 8, records,
                                                 std::chrono::milliseconds(100), &keep));
  eng.stop();
  CHECK(r.report.error.empty());
  CHECK(r.report.records == records);
  for (std::uint64_t n : r.report.per_channel) CHECK(n == records / 8);
  check_tcp_ends(r);
}

TEST_CASE("remote channels work when the transport's executor is not the gate's or the partition's",
          "[tcp][channel]") {
  transports keep;
  engine eng({.executors = 2, .handle_signals = false});
  network_memory memory(64 << 20, 32 << 10, 2);
  const tcp_report r = eng.block_on(tcp_transfer(&eng.at(0), &eng.at(1), &eng.at(1), &eng.at(0), &memory, 5,
                                                 300'000, std::chrono::milliseconds(1), &keep));
  eng.stop();
  CHECK(r.report.error.empty());
  CHECK(r.report.records == 300'000);
  check_tcp_ends(r);
}

// --- scenario 22: malformed input closes that connection only ------------------------------------

namespace {

struct malformed_case {
  const char* name;
  std::vector<std::byte> bytes;
  const char* reason;  // what the close frame's reason must contain
};

std::vector<malformed_case> malformed_cases() {
  std::vector<malformed_case> cases;
  cases.push_back({"bad magic", raw_header(2, 0, 8, 0, "HTTP"), "bad magic"});
  cases.push_back({"unsupported version", raw_header(2, 0, 8, 0, "SLCE", 9), "version"});
  cases.push_back({"unknown frame type", raw_header(42, 0, 0, 0), "unknown frame type"});
  cases.push_back({"oversized payload", raw_header(2, 0, 1u << 20, 0), "exceeds"});
  cases.push_back({"frame for an unknown channel", concat(raw_header(4, 99, 4, 0), std::vector<std::byte>(4, std::byte{1})),
                   "unknown channel"});
  partition_request request{123, 0, 1};
  encoded_frame open = encode_partition_request(2, 5, request);  // sequence 5 instead of 0
  cases.push_back({"out-of-sequence partition request", {open.bytes().begin(), open.bytes().end()}, "sequence"});
  std::vector<std::byte> checksum = raw_header(4, 1, 4, 0);
  checksum[12] ^= std::byte{0x40};
  cases.push_back({"header checksum mismatch", checksum, "checksum"});
  return cases;
}

// Connects to `target`, passes the hello, sends `bytes`, and returns the reason of the close frame
// the peer answers with (empty if none came before the end of the stream).
task<std::string> attack(address target, std::vector<std::byte> bytes) {
  fake_peer p = co_await dial_peer(target);
  if (!p.hello.ok) throw std::runtime_error("the hello failed: " + p.hello.reason);
  co_await p.send(std::move(bytes));
  auto shut = co_await p.stream.shutdown(SHUT_WR);  // the end of our stream: mid-frame, for the half header
  shut.value();
  std::string reason;
  for (;;) {
    peer_frame f = co_await p.next_control();
    if (f.ended) break;
    if (std::holds_alternative<close_connection>(f.payload)) reason = f.close_reason;
  }
  (void)co_await p.stream.close();
  co_return reason;
}

// Every attack, the half header last: a peer that disconnects mid-frame.
std::vector<malformed_case> attacks() {
  std::vector<malformed_case> all = malformed_cases();
  std::vector<std::byte> half = raw_header(4, 1, 4, 0);
  half.resize(10);
  all.push_back({"half a header, then the end of the stream", std::move(half), ""});
  return all;
}

// What the attacker saw, and the state of the good transfer around each attack.
struct attack_log {
  std::vector<std::string> reasons;               // of each close frame ("" if none came)
  std::vector<std::uint64_t> records_before;      // records the good channels had delivered
  std::vector<std::uint64_t> failed_after;        // the attacked transport's failed connections
  std::vector<std::size_t> receiver_connections;  // the good side's connections, after the attack
  std::vector<std::string> channel_faults;        // the good gate's failed or ended channels
};

std::string channel_faults(const input_gate& gate) {
  std::string faults;
  for (std::uint32_t c = 0; c < gate.channels(); ++c) {
    if (!gate.failure(c).empty()) faults += "channel " + std::to_string(c) + " failed: " + gate.failure(c) + "; ";
    if (gate.channel_ended(c)) faults += "channel " + std::to_string(c) + " ended; ";
  }
  return faults;
}

// The attacks run one by one while the good transfer is paused mid-way (its consumer stopped, its
// sender out of credit, its connection open), and the good connection carries `step` more records
// between any two of them: the overlap is fixed by the order of the test, not by timing. If the good
// transfer breaks or stalls, the test stops it (a failure, not a hang).
task<void> attack_in_order(tcp_transport* attacked, tcp_transport* good_side, receiver_side* r,
                           const receive_report* report, pacing* pace, attack_log* log, std::stop_source* stop) {
  constexpr std::uint64_t step = 20'000;
  constexpr auto stall = std::chrono::seconds(10);
  co_await allow(pace, step);
  bool moving = co_await with_timeout(wait_reached(pace), stall);
  for (malformed_case& c : attacks()) {
    if (!moving) break;
    log->records_before.push_back(report->records);
    std::string reason = co_await attack(attacked->local_address(), std::move(c.bytes));
    log->reasons.push_back(std::move(reason));
    log->failed_after.push_back(attacked->stats().connections_failed);
    log->receiver_connections.push_back(good_side->connections());
    log->channel_faults.push_back(channel_faults(r->gate));
    if (!log->channel_faults.back().empty()) break;
    co_await allow(pace, report->records + step);
    moving = co_await with_timeout(wait_reached(pace), stall);
  }
  co_await allow(pace, UINT64_MAX);  // the rest of the transfer
  const bool ended = co_await with_timeout(wait_reached(pace), stall);
  if (!ended) stop->request_stop();
}

// All on one executor (the test's thread), both transports and the attacker included.
task<void> transfer_under_attack(network_memory* memory, std::uint64_t records, receive_report* report,
                                 attack_log* log, transport_stats* attacked_stats, transport_stats* good_stats) {
  std::unique_ptr<tcp_transport> sending = co_await start_transport({});
  std::unique_ptr<tcp_transport> receiving = co_await start_transport({});
  std::unique_ptr<sender_side> s = co_await make_sender(&memory->pool(0), 4, 24, std::chrono::milliseconds(1));
  co_await serve(sending.get(), s.get());
  std::unique_ptr<receiver_side> r = co_await make_receiver(&memory->pool(0), 4, 8);
  std::vector<remote_input*> inputs;
  co_await open_inputs(receiving.get(), sending->local_address(), r.get(), &inputs);
  pacing pace;
  std::stop_source stop;
  co_await when_all(with_stop_token(run_senders(s.get(), records, report), stop.get_token()),
                    with_stop_token(run_receiver(r.get(), report, &pace), stop.get_token()),
                    attack_in_order(sending.get(), receiving.get(), r.get(), report, &pace, log, &stop));
  *attacked_stats = sending->stats();
  *good_stats = receiving->stats();
  co_await receiving->close();
  co_await sending->close();
  std::size_t closed = 0;
  co_await wait_inputs_closed(&inputs, &closed);
  co_await destroy_receiver(std::move(r), report);
  co_await destroy_sender(std::move(s), report);
}

}  // namespace

TEST_CASE("scenario 22: a malformed, oversized or out-of-sequence frame closes that connection only",
          "[tcp][scenario]") {
  network_memory memory(32 << 20, 32 << 10, 1);
  constexpr std::uint64_t records = 400'000;
  receive_report report;
  attack_log log;
  transport_stats attacked;
  transport_stats good;
  sync_wait(transfer_under_attack(&memory, records, &report, &log, &attacked, &good));

  // The good connection carried everything while the bad ones were thrown out.
  CHECK(report.error.empty());
  CHECK(report.records == records);
  CHECK(good.connections_failed == 0);
  const std::vector<malformed_case> cases = attacks();
  REQUIRE(log.reasons.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].name << ": the close frame said '" << log.reasons[i] << "'");
    if (i + 1 < cases.size()) {
      CHECK(log.reasons[i].find(cases[i].reason) != std::string::npos);
    } else {
      CHECK(log.reasons[i].empty());  // no frame to answer: the peer is gone
    }
    CHECK(log.failed_after[i] == i + 1);  // this connection, and no other, failed
    CHECK(log.receiver_connections[i] == 1);
    CHECK(log.channel_faults[i].empty());
    // Each attack came while the good transfer was mid-way, after more of it than the one before.
    CHECK(log.records_before[i] > (i == 0 ? 0 : log.records_before[i - 1]));
    CHECK(log.records_before[i] < records);
  }
  CHECK(attacked.connections_failed == cases.size());
  REQUIRE_FALSE(attacked.recent_failures.empty());
  CHECK(attacked.recent_failures.back().find("disconnected mid-frame") != std::string::npos);
}

// --- misbehaving and vanishing peers -------------------------------------------------------------

namespace {

// A fake sender process: accepts one connection, passes the hello, reads the partition request,
// then sends `frames`.
task<void> fake_sender(sluice::io::tcp_listener* listener, std::vector<std::byte> frames, bool then_vanish) {
  fake_peer p = co_await accept_peer(listener);
  peer_frame request = co_await p.next_control();
  if (request.ended) throw std::runtime_error("no partition request came");
  co_await p.send(std::move(frames));
  if (!then_vanish) co_await p.drain();  // until the transport closes the connection on us
  (void)co_await p.stream.close();
}

// A buffer frame holding `records` records of channel 0 (numbered from `first`), as the fixture's
// consumer expects them.
std::vector<std::byte> buffer_frame(std::uint64_t seq, std::uint64_t first, std::size_t records) {
  constexpr std::size_t record_bytes = 4 + 8;
  header_bytes h;
  encode_header({frame_type::buffer, 0, 0, seq, static_cast<std::uint32_t>(records * record_bytes)}, h);
  std::vector<std::byte> out(h.begin(), h.end());
  for (std::size_t i = 0; i < records; ++i) {
    const std::uint64_t value = record_of(0, first + i);
    const std::size_t at = out.size();
    out.resize(at + record_bytes);
    const std::uint32_t length = 8;
    std::memcpy(out.data() + at, &length, 4);
    std::memcpy(out.data() + at + 4, &value, 8);
  }
  return out;
}

struct channel_fault {
  std::string failure;  // the gate's failure text for the channel (empty if it ended normally)
  bool closed = false;  // what the input's wait_closed() said
  receive_report report;
};

void check_closed_cleanly(const channel_fault& f) {
  CHECK(f.closed);
  CHECK(f.report.credit_accounting.empty());
}

// One gate channel fed by the fake peer.
task<channel_fault> receive_from_fake(network_memory* memory, std::vector<std::byte> frames, bool then_vanish) {
  auto listening = sluice::io::tcp_listener::listen(address::loopback_v4());
  sluice::io::tcp_listener listener = std::move(listening).value();
  std::unique_ptr<tcp_transport> t = co_await start_transport({});
  receiver_side r(memory->pool(0), 1, 0);
  std::vector<remote_input*> inputs;
  co_await open_inputs(t.get(), listener.local_address(), &r, &inputs);
  channel_fault out;
  co_await when_all(fake_sender(&listener, std::move(frames), then_vanish), run_receiver(&r, &out.report));
  out.closed = co_await inputs[0]->wait_closed();
  out.failure = r.gate.failure(0);
  co_await t->close();
  (void)co_await listener.close();
  co_return out;
}

task<channel_fault> refused_body(network_memory* memory) {
  std::unique_ptr<tcp_transport> server = co_await start_transport({.partition_request_timeout = std::chrono::milliseconds(200)});
  std::unique_ptr<tcp_transport> client = co_await start_transport({});
  receiver_side r(memory->pool(0), 1, 0);
  std::vector<remote_input*> inputs;
  co_await open_inputs(client.get(), server->local_address(), &r, &inputs);  // partition 7 is served nowhere
  channel_fault out;
  co_await run_receiver(&r, &out.report);
  out.closed = co_await inputs[0]->wait_closed();
  out.failure = r.gate.failure(0);
  co_await client->close();
  co_await server->close();
  co_return out;
}

}  // namespace

TEST_CASE("a buffer frame sent without credit fails the channel with the fault named", "[tcp][faults]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  engine eng({.executors = 1, .handle_signals = false});
  // The gate grants 2 exclusive credits; the peer sends 3 buffers.
  std::vector<std::byte> frames;
  for (std::uint64_t i = 0; i < 3; ++i) frames = concat(std::move(frames), buffer_frame(i, i * 10, 10));
  const channel_fault got = eng.block_on(receive_from_fake(&memory, std::move(frames), false));
  check_closed_cleanly(got);
  CHECK(got.failure.find("no credit was granted") != std::string::npos);
  CHECK(got.failure.find("127.0.0.1") != std::string::npos);
}

TEST_CASE("an event frame whose payload does not decode fails the channel", "[tcp][faults]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  engine eng({.executors = 1, .handle_signals = false});
  header_bytes h;
  encode_header({frame_type::event, 0, 0, 0, 3}, h);
  std::vector<std::byte> frames(h.begin(), h.end());
  frames.insert(frames.end(), {std::byte{0x55}, std::byte{1}, std::byte{2}});
  const channel_fault got = eng.block_on(receive_from_fake(&memory, std::move(frames), false));
  check_closed_cleanly(got);
  CHECK(got.failure.find("does not decode") != std::string::npos);
}

TEST_CASE("a peer that vanishes mid-frame fails its channels with the cause", "[tcp][faults]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  engine eng({.executors = 1, .handle_signals = false});
  std::vector<std::byte> frames = buffer_frame(0, 0, 100);
  frames.resize(frames.size() - 500);  // half the payload, then the peer is gone
  const channel_fault got = eng.block_on(receive_from_fake(&memory, std::move(frames), true));
  check_closed_cleanly(got);
  CHECK(got.failure.find("mid-frame") != std::string::npos);
  CHECK(got.failure.find("connection to 127.0.0.1") != std::string::npos);
}

TEST_CASE("a partition request for a partition served nowhere is refused after the timeout", "[tcp][faults]") {
  network_memory memory(4 << 20, 32 << 10, 1);
  engine eng({.executors = 1, .handle_signals = false});
  const channel_fault got = eng.block_on(refused_body(&memory));
  check_closed_cleanly(got);
  CHECK(got.failure.find("refused channel") != std::string::npos);
  CHECK(got.failure.find("partition 7") != std::string::npos);
}
