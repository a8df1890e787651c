// The world: executors of an engine on one thread, virtual time, files, and reproducibility.

#include <sluice/io/file.hpp>
#include <sluice/io/tcp.hpp>
#include <sluice/io/fs.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/wait_report.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/sim/world.hpp>

#include <support/idle_connections.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

using namespace sluice;
using namespace std::chrono_literals;

namespace {

runtime::task<std::string> write_and_read(std::string path, std::string data) {
  auto f = (co_await io::file::open(path, io::open_options{.read = true, .write = true, .create = true, .truncate = true})).value();
  const auto bytes = std::as_bytes(std::span(data));
  (co_await f.write_all(bytes, 0)).value();
  (co_await f.fsync()).value();
  std::string back(data.size(), '\0');
  const std::size_t n = (co_await f.read_full(std::as_writable_bytes(std::span(back)), 0)).value();
  back.resize(n);
  (co_await f.close()).value();
  co_return back;
}

runtime::task<void> on_executor(runtime::executor* ex, std::string path, std::string data, std::string* out) {
  co_await runtime::switch_to(*ex);
  *out = co_await write_and_read(std::move(path), std::move(data));
}

runtime::task<std::chrono::nanoseconds> sleeper(runtime::executor* ex) {
  co_await runtime::switch_to(*ex);
  const auto start = ex->now();
  const bool slept = co_await runtime::sleep_for(5s);
  co_return slept ? ex->now() - start : std::chrono::nanoseconds(-1);
}

runtime::task<void> both(runtime::engine* e, std::string* a, std::string* b) {
  std::vector<runtime::task<void>> jobs;
  jobs.push_back(on_executor(&e->at(0), "/sim/a", std::string(10000, 'a'), a));
  jobs.push_back(on_executor(&e->at(1), "/sim/b", "bee", b));
  co_await runtime::when_all(std::move(jobs));
}

std::uint64_t run_scenario(std::uint64_t seed) {
  sim::world w({.seed = seed});
  runtime::system_scope scope(w.kernel());
  std::string a, b;
  {
    runtime::engine eng({.executors = 2, .handle_signals = false, .simulation = &w});
    eng.block_on(both(&eng, &a, &b));
  }
  return w.trace_hash();
}

runtime::task<void> record_after_yield(int id, std::vector<int>* order) {
  co_await runtime::yield();
  order->push_back(id);
}

runtime::task<void> eight_ready(runtime::executor* ex, std::vector<int>* order) {
  co_await runtime::switch_to(*ex);
  runtime::scope children;
  for (int i = 0; i < 8; ++i) children.spawn(record_after_yield(i, order));
  co_await children.join();
}

std::vector<int> ready_order(std::uint64_t seed) {
  sim::world w({.seed = seed});
  runtime::system_scope scope(w.kernel());
  std::vector<int> order;
  runtime::engine eng({.executors = 1, .handle_signals = false, .simulation = &w});
  eng.block_on(eight_ready(&eng.at(0), &order));
  return order;
}

runtime::task<void> accept_flag(io::tcp_listener* l, bool* accepted) {
  auto s = co_await l->accept();
  *accepted = s.ok();
}

// Two accepts nobody connects to, on a ring of one: the second waits in the backlog; a stop cancels
// both, the backlogged one without ever entering the ring. Yields how many were queued.
runtime::task<std::size_t> stop_backlogged(runtime::executor* ex, sim::world* w, bool* first, bool* second) {
  co_await runtime::switch_to(*ex);
  auto listener = io::tcp_listener::listen(io::address::loopback_v4(0)).value();
  runtime::scope accepts;
  accepts.spawn(accept_flag(&listener, first));
  accepts.spawn(accept_flag(&listener, second));
  for (int i = 0; i < 4; ++i) co_await runtime::yield();
  const std::size_t queued = w->backlogged_operations();
  accepts.request_stop();
  co_await accepts.join();
  (void)co_await listener.close();
  co_return queued;
}

runtime::task<test::idle_connections_report> idle_then_write(runtime::executor* ex, int connections) {
  co_await runtime::switch_to(*ex);
  co_return co_await test::idle_connections_then_write(connections, "/sim/state");
}

runtime::task<io::result<std::vector<std::string>>> list_on(runtime::executor* ex, std::string dir) {
  co_await runtime::switch_to(*ex);
  co_return co_await io::list_directory(std::move(dir));
}

class waits_for_godot final : public runtime::wait_reporter {
 public:
  void report_waits(std::string& out) const override { out += "  task 7 (estragon) waits for Godot\n"; }
};

}  // namespace

TEST_CASE("world: the seed draws which ready coroutine runs next, the same seed the same order") {
  const std::vector<int> fifo{0, 1, 2, 3, 4, 5, 6, 7};
  bool some_other = false;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const std::vector<int> order = ready_order(seed);
    REQUIRE(order.size() == 8);
    CHECK(std::is_permutation(order.begin(), order.end(), fifo.begin()));
    CHECK(ready_order(seed) == order);
    if (order != fifo) some_other = true;
  }
  CHECK(some_other);
}

TEST_CASE("world: a ring of one operation runs the rest from its backlog, in order, and a stop cancels a backlogged one") {
  sim::world w({.seed = 5, .ring_entries = 1});
  runtime::system_scope scope(w.kernel());
  std::string a, b;
  {
    runtime::engine eng({.executors = 2, .handle_signals = false, .simulation = &w});
    eng.block_on(both(&eng, &a, &b));
    bool first = true, second = true;
    const std::size_t queued = eng.block_on(stop_backlogged(&eng.at(0), &w, &first, &second));
    CHECK(queued == 1);  // the second accept
    CHECK_FALSE(first);
    CHECK_FALSE(second);
  }
  CHECK(w.pending_operations() == 0);  // nothing left in the ring or the backlog
  CHECK(a == std::string(10000, 'a'));
  CHECK(b == "bee");
}

TEST_CASE("world: a ring of 8 full of recvs on idle connections still writes and fsyncs a file, as io_uring does") {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    sim::world w({.seed = seed, .ring_entries = 8});  // 7 places for waits; 13 wait
    runtime::system_scope scope(w.kernel());
    test::idle_connections_report r;
    {
      runtime::engine eng({.executors = 1, .handle_signals = false, .simulation = &w});
      r = eng.block_on(idle_then_write(&eng.at(0), 6));
    }
    CHECK(r.outstanding_while_idle == 14);
    CHECK(r.file_done);
    CHECK(r.file_error.empty());
    CHECK(r.recvs_ended_before_file_done == 0);
    CHECK(r.recvs_ended == 12);
    CHECK(r.contents == "checkpoint state");
    CHECK(w.pending_operations() == 0);
    CHECK(w.open_descriptors() == 0);
  }
}

TEST_CASE("world: a hang report says what the program's registered reporters wait for") {
  sim::world w({.seed = 3});
  runtime::system_scope scope(w.kernel());
  const waits_for_godot reporter;
  const runtime::wait_report_scope reporting(reporter);
  runtime::engine eng({.executors = 2, .handle_signals = false, .simulation = &w});
  runtime::executor* executors[] = {&eng.at(0), &eng.at(1)};
  const std::string report = w.describe_waits(executors);
  CHECK(report.find("executor 1: ") != std::string::npos);
  CHECK(report.find("task 7 (estragon) waits for Godot") != std::string::npos);
}

TEST_CASE("world: the same seed makes the same trace, another seed another") {
  CHECK(run_scenario(7) == run_scenario(7));
  CHECK(run_scenario(7) != run_scenario(8));
}

TEST_CASE("world: two executors on one thread write files through io::file, time is virtual") {
  sim::world w({.seed = 7});
  runtime::system_scope scope(w.kernel());
  std::string a, b;
  {
    runtime::engine eng({.executors = 2, .handle_signals = false, .simulation = &w});
    eng.block_on(both(&eng, &a, &b));
    const auto slept = eng.block_on(sleeper(&eng.at(1)));
    CHECK(slept >= 5s);
    CHECK(slept < 6s);
  }
  CHECK(a == std::string(10000, 'a'));
  CHECK(b == "bee");
  const auto image = w.storage().visible();
  REQUIRE(image.find("/sim/a") != nullptr);
  CHECK(image.find("/sim/b")->data == "bee");
  CHECK(w.open_descriptors() == 0);
  CHECK(w.pending_operations() == 0);
  CHECK(w.elapsed() >= 5s);
}

namespace {

struct sim_peek {
  bool nothing_before = false;
  std::size_t waiting = 0;
  std::string received;
  bool ended_after_close = false;
};

runtime::task<sim_peek> peek_in_world(runtime::executor* ex) {
  co_await runtime::switch_to(*ex);
  auto listener = io::tcp_listener::listen(io::address::loopback_v4()).value();
  auto [client, server] = co_await runtime::when_all(io::tcp_stream::connect(listener.local_address()), listener.accept());
  auto c = std::move(client).value();
  auto s = std::move(server).value();
  sim_peek out;
  std::string buf(8, '\0');
  auto into = std::as_writable_bytes(std::span(buf));
  out.nothing_before = !(co_await c.try_peek(into)).value().has_value();
  const std::string hello = "hello";
  (co_await s.send_all(std::as_bytes(std::span(hello.data(), hello.size())))).value();
  for (int i = 0; i < 100 && out.waiting == 0; ++i) {
    const auto peeked = (co_await c.try_peek(into)).value();
    if (!peeked) {
      (void)co_await runtime::sleep_for(1ms);
      continue;
    }
    out.waiting = *peeked;
  }
  std::string got(5, '\0');
  (co_await c.recv_exact(std::as_writable_bytes(std::span(got)))).value();
  out.received = got;
  (co_await s.close()).value();
  for (int i = 0; i < 100 && !out.ended_after_close; ++i) {
    const auto peeked = (co_await c.try_peek(into)).value();
    out.ended_after_close = peeked.has_value() && *peeked == 0;
    if (!out.ended_after_close) (void)co_await runtime::sleep_for(1ms);
  }
  (co_await c.close()).value();
  (co_await listener.close()).value();
  co_return out;
}

}  // namespace

TEST_CASE("world: try_peek never waits and consumes nothing on a simulated connection") {
  sim::world w({.seed = 3});
  runtime::system_scope scope(w.kernel());
  runtime::engine eng({.executors = 1, .handle_signals = false, .simulation = &w});
  const auto out = eng.block_on(peek_in_world(&eng.at(0)));
  CHECK(out.nothing_before);
  CHECK(out.waiting >= 1);
  CHECK(out.waiting <= 5);  // the simulated stream may cut what has arrived
  CHECK(out.received == "hello");
  CHECK(out.ended_after_close);
}

TEST_CASE("world: io::list_directory runs inline on the simulated disk, and the file's size is a statx of it") {
  sim::disk_image image;
  image.add_directory("/sim/data");
  image.add_file("/sim/data/b", "bee");
  image.add_file("/sim/data/a", std::string(5000, 'a'));
  sim::world w({.seed = 11}, image);
  runtime::system_scope scope(w.kernel());
  {
    runtime::engine eng({.executors = 1, .handle_signals = false, .simulation = &w});
    auto names = eng.block_on(list_on(&eng.at(0), "/sim/data"));
    REQUIRE(names);
    std::sort(names->begin(), names->end());
    CHECK(*names == std::vector<std::string>{"a", "b"});
    struct size_of {
      static runtime::task<std::uint64_t> run(runtime::executor* ex) {
        co_await runtime::switch_to(*ex);
        auto f = (co_await io::file::open("/sim/data/a")).value();
        const auto size = (co_await f.size()).value();
        (co_await f.close()).value();
        co_return size;
      }
    };
    CHECK(eng.block_on(size_of::run(&eng.at(0))) == 5000);
  }
  CHECK(w.open_descriptors() == 0);
  CHECK(w.pending_operations() == 0);
}
