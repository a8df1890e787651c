// Timeouts, stops and shutdown with TCP operations in flight: each ends promptly, and no descriptor
// or coroutine frame is left behind.

#include <sluice/io/tcp.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/runtime/when_any.hpp>

#include <support/backends.hpp>
#include <support/fd_count.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

using namespace sluice::io;
using namespace std::chrono_literals;
using sluice::runtime::live_frames;
using sluice::runtime::sync_wait;
using sluice::runtime::task;
using sluice::runtime::with_timeout;
using sluice::test::backend_kind;
using sluice::test::open_fd_count;

namespace {

task<bool> nap(std::chrono::milliseconds duration) { co_return co_await sluice::runtime::sleep_for(duration); }

struct timed_accept {
  bool accepted_in_time;
  int fds_leaked;
  bool accepts_afterwards;
};

task<timed_accept> accept_with_timeout() {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  const int before = open_fd_count();
  auto r = co_await with_timeout(listener.accept(), 20ms);
  const int leaked = open_fd_count() - before;
  // The listener is still good: a later accept gets a connection.
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  auto server = co_await listener.accept();
  co_return timed_accept{r.has_value(), leaked, server.ok()};
}

}  // namespace

TEST_CASE("an accept cancelled by with_timeout returns, leaks no descriptor and leaves the listener usable", "[tcp][cancel]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  const auto frames_before = live_frames();
  const auto out = sync_wait(accept_with_timeout(), sluice::test::backend_options(kind));
  REQUIRE_FALSE(out.accepted_in_time);
  REQUIRE(out.fds_leaked == 0);
  REQUIRE(out.accepts_afterwards);
  REQUIRE(live_frames() == frames_before);
}

namespace {

task<void> recv_into(tcp_stream* stream, std::vector<std::byte>* buf, std::optional<result<std::size_t>>* out) {
  out->emplace(co_await stream->recv(*buf));
}

struct stopped_recv {
  std::string peer;
  std::size_t winner;
  std::optional<result<std::size_t>> stopped;
  std::optional<std::optional<result<std::size_t>>> timed;
  std::string later;  // what a later recv got
};

task<stopped_recv> stop_recvs_in_flight() {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  auto server = (co_await listener.accept()).value();
  stopped_recv out{client.peer().to_string(), 0, {}, {}, {}};
  std::vector<std::byte> buf(16);
  // Nothing arrives: the sleep wins and the recv in flight is stopped through its stop token.
  auto any = co_await sluice::runtime::when_any(recv_into(&client, &buf, &out.stopped), nap(10ms));
  out.winner = any.index;
  out.timed.emplace(co_await with_timeout(client.recv(buf), 10ms));
  // Neither stopped recv consumed anything: the next one gets the bytes sent now.
  const std::string hello = "hello";
  (co_await server.send_all(std::as_bytes(std::span(hello)))).value();
  const std::size_t n = (co_await client.recv(buf)).value();
  out.later.assign(reinterpret_cast<const char*>(buf.data()), n);
  co_return out;
}

}  // namespace

TEST_CASE("a recv stopped in flight by when_any or with_timeout returns ECANCELED and loses no data", "[tcp][cancel]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  const auto frames_before = live_frames();
  const auto out = sync_wait(stop_recvs_in_flight(), sluice::test::backend_options(kind));
  REQUIRE(out.winner == 1);
  REQUIRE(out.stopped.has_value());
  REQUIRE_FALSE(out.stopped->ok());
  REQUIRE(out.stopped->error().code() == std::errc::operation_canceled);
  REQUIRE(out.stopped->error().message() == "recv from " + out.peer + ": Operation canceled");
  REQUIRE(out.timed.has_value());
  REQUIRE_FALSE(out.timed->has_value());  // with_timeout: nullopt
  REQUIRE(out.later == "hello");
  REQUIRE(live_frames() == frames_before);
}

namespace {

task<void> accept_into(tcp_listener* listener, std::optional<result<tcp_stream>>* out) {
  out->emplace(co_await listener->accept());
}

task<void> close_soon(tcp_listener* listener) {
  co_await nap(5ms);
  (co_await listener->close()).value();
}

task<std::pair<bool, std::optional<result<tcp_stream>>>> close_listener_under_accept() {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  std::optional<result<tcp_stream>> accepted;
  // The guard turns a missing wake-up into a failed assertion instead of a hung test.
  const bool finished = (co_await with_timeout(sluice::runtime::when_all(accept_into(&listener, &accepted), close_soon(&listener)), 5s)).has_value();
  co_return std::pair{finished, std::move(accepted)};
}

}  // namespace

TEST_CASE("closing a listener wakes the accept waiting on it", "[tcp][cancel]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  const auto [finished, accepted] = sync_wait(close_listener_under_accept(), sluice::test::backend_options(kind));
  REQUIRE(finished);
  REQUIRE(accepted.has_value());
  REQUIRE_FALSE(accepted->ok());
  REQUIRE(accepted->error().code() == std::errc::invalid_argument);
}

namespace {

task<void> close_stream_soon(tcp_stream* stream) {
  co_await nap(5ms);
  (co_await stream->close()).value();
}

struct closed_under_recv {
  bool finished;
  std::optional<result<std::size_t>> waiting;  // the recv that was waiting when close() ran
  result<std::size_t> peer;                    // what the other end then receives
};

task<closed_under_recv> close_stream_under_recv() {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto client = (co_await tcp_stream::connect(listener.local_address())).value();
  auto server = (co_await listener.accept()).value();
  std::vector<std::byte> buf(16);
  std::optional<result<std::size_t>> waiting;
  const bool finished =
      (co_await with_timeout(sluice::runtime::when_all(recv_into(&client, &buf, &waiting), close_stream_soon(&client)), 5s))
          .has_value();
  std::vector<std::byte> peer_buf(16);
  auto peer = co_await with_timeout(server.recv(peer_buf), 5s);
  co_return closed_under_recv{finished, std::move(waiting),
                              peer ? std::move(*peer) : result<std::size_t>(error::from_errno(ETIMEDOUT, "peer recv"))};
}

}  // namespace

TEST_CASE("closing a stream ends a recv waiting on it in another task, and the peer sees the end", "[tcp][cancel]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  const auto out = sync_wait(close_stream_under_recv(), sluice::test::backend_options(kind));
  REQUIRE(out.finished);
  REQUIRE(out.waiting.has_value());
  REQUIRE(out.waiting->ok());
  REQUIRE(out.waiting->value() == 0);
  REQUIRE(out.peer.ok());
  REQUIRE(out.peer.value() == 0);
}

namespace {

// A listener whose accept queue (backlog 0) is already full: the kernel drops further SYNs, so a
// connect to it stays in flight until stopped.
task<std::pair<bool, int>> connect_with_timeout() {
  auto listener = tcp_listener::listen(address::loopback_v4(), 0).value();
  auto first = (co_await tcp_stream::connect(listener.local_address())).value();
  const int before = open_fd_count();
  auto r = co_await with_timeout(tcp_stream::connect(listener.local_address()), 50ms);
  co_return std::pair{r.has_value(), open_fd_count() - before};
}

}  // namespace

TEST_CASE("a connect cancelled by with_timeout returns and closes its socket", "[tcp][cancel]") {
  // io_uring only: the test backend performs connect(2) synchronously, which would block here.
  const auto [connected_in_time, leaked] = sync_wait(connect_with_timeout());
  REQUIRE_FALSE(connected_in_time);
  REQUIRE(leaked == 0);
}

// --- shutdown with operations in flight ---------------------------------------------------------

namespace {

struct blocked_op {
  bool finished = false;
  std::optional<std::error_code> code;  // empty: the operation succeeded
};

task<void> accept_until_stopped(tcp_listener listener, blocked_op* report) {
  auto r = co_await listener.accept();
  if (!r) report->code = r.error().code();
  report->finished = true;
}

task<void> recv_until_stopped(tcp_stream stream, blocked_op* report) {
  std::vector<std::byte> buf(64);
  auto r = co_await stream.recv(buf);
  if (!r) report->code = r.error().code();
  report->finished = true;
}

// Leaves three detached tasks blocked: one in accept, two in recv (on two connections). Each task owns
// its socket, so only the task's end can close it. The far end of each connection goes to
// `far_ends`, held by the test until the executors are gone, so a recv cannot end with EOF.
task<void> start_blocked_tasks(blocked_op* reports, sluice::runtime::executor* other, std::vector<tcp_stream>* far_ends) {
  auto listener = tcp_listener::listen(address::loopback_v4()).value();
  auto a = (co_await tcp_stream::connect(listener.local_address())).value();
  far_ends->push_back((co_await listener.accept()).value());
  far_ends->push_back((co_await tcp_stream::connect(listener.local_address())).value());
  auto b = (co_await listener.accept()).value();
  auto* here = sluice::runtime::executor::current();
  sluice::runtime::spawn_on(*here, accept_until_stopped(std::move(listener), &reports[0]));
  sluice::runtime::spawn_on(*here, recv_until_stopped(std::move(a), &reports[1]));
  sluice::runtime::spawn_on(other ? *other : *here, recv_until_stopped(std::move(b), &reports[2]));
  co_await nap(5ms);  // let every operation reach the kernel
}

void require_cancelled(const blocked_op (&reports)[3]) {
  for (const auto& r : reports) {
    INFO("operation " << (&r - reports) << " (0: accept, 1 and 2: recv)");
    REQUIRE(r.finished);
    REQUIRE(r.code.has_value());
    REQUIRE(*r.code == std::errc::operation_canceled);
  }
}

}  // namespace

TEST_CASE("detached tasks blocked in accept and recv are cancelled when sync_wait's executor shuts down", "[tcp][cancel][shutdown]") {
  const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
  INFO("backend: " << to_string(kind));
  const auto frames_before = live_frames();
  const int fds_before = open_fd_count();
  blocked_op reports[3];
  {
    std::vector<tcp_stream> far_ends;
    sync_wait(start_blocked_tasks(reports, nullptr, &far_ends), sluice::test::backend_options(kind));
    REQUIRE(far_ends.size() == 2);
  }
  require_cancelled(reports);
  REQUIRE(open_fd_count() == fds_before);
  REQUIRE(live_frames() == frames_before);
}

TEST_CASE("detached tasks blocked in accept and recv on two executors are cancelled when the engine stops", "[tcp][cancel][shutdown]") {
  const auto frames_before = live_frames();
  const int fds_before = open_fd_count();
  blocked_op reports[3];
  {
    std::vector<tcp_stream> far_ends;
    sluice::runtime::engine engine(sluice::runtime::engine_options{.executors = 2, .handle_signals = false});
    engine.block_on(start_blocked_tasks(reports, &engine.at(1), &far_ends));
    engine.stop();
    REQUIRE(far_ends.size() == 2);
  }
  require_cancelled(reports);
  REQUIRE(open_fd_count() == fds_before);
  REQUIRE(live_frames() == frames_before);
}
