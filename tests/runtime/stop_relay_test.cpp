// Stop relays (detail/stop_relay.hpp): the waits of a group's children link into one relay per group
// instead of registering a std::stop_callback each. Cancellation must stay exact: a stop before any
// operation, with many in flight, through nested groups, from another thread, while an operation
// completes, and while the group itself ends.

#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/io_awaitable.hpp>
#include <sluice/runtime/scope.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <cerrno>
#include <functional>
#include <stop_token>
#include <thread>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

// An executor on a test_backend that performs nothing by itself: the first time the executor would
// block (every operation in flight), `first_idle` runs; later idles run `later_idle`, if set.
struct stop_harness {
  test_backend* backend = nullptr;
  executor ex{sluice::test::test_backend_options(backend)};
  std::stop_source source;
  std::size_t in_flight_at_first_idle = 0;
  int idle_calls = 0;
  std::function<void(test_backend&)> first_idle;
  std::function<void(test_backend&)> later_idle;

  stop_harness() {
    backend->set_auto(false);
    backend->on_idle = [this](test_backend& b) {
      if (++idle_calls == 1) {
        in_flight_at_first_idle = b.pending().size();
        if (first_idle) first_idle(b);
      } else if (later_idle) {
        later_idle(b);
      }
    };
  }
  ~stop_harness() { backend->on_idle = nullptr; }
  void run(task<void> t) { ex.block_on(with_stop_token(std::move(t), source.get_token())); }
};

io_op nop_op() {
  io_op op;
  op.code = op_code::nop;
  return op;
}

task<void> nop_into(int* out) { *out = co_await submit_op(nop_op()); }

task<void> nops_in_scope(std::vector<int>* results) {
  scope s;
  for (int& r : *results) s.spawn(nop_into(&r));
  co_await s.join();
}

task<void> nops_in_when_all(std::vector<int>* results) {
  std::vector<task<void>> children;
  for (int& r : *results) children.push_back(nop_into(&r));
  co_await when_all(std::move(children));
}

task<void> inner_scope(std::vector<int>* all, std::size_t from, std::size_t n) {
  scope inner;
  for (std::size_t i = from; i < from + n; ++i) inner.spawn(nop_into(&(*all)[i]));
  co_await inner.join();
}

// Two levels: each outer child runs a scope of its own over a slice of the results.
task<void> nested_scopes(std::vector<int>* results, std::size_t groups) {
  scope outer;
  const std::size_t per = results->size() / groups;
  for (std::size_t g = 0; g < groups; ++g) outer.spawn(inner_scope(results, g * per, per));
  co_await outer.join();
}

void stop_from_another_thread(std::stop_source& source) {
  std::thread t([&source] { source.request_stop(); });
  t.join();
}

}  // namespace

TEST_CASE("a scope stopped before any operation submits none of its children's operations", "[stop_relay]") {
  stop_harness h;
  h.source.request_stop();
  std::vector<int> results(16, 1);
  h.run(nops_in_scope(&results));
  for (int r : results) REQUIRE(r == -ECANCELED);
  REQUIRE(h.backend->submitted(op_code::nop) == 0);
  REQUIRE(h.backend->submitted(op_code::cancel) == 0);
}

TEST_CASE("a stop on the owner thread cancels 256 operations in flight under a scope", "[stop_relay]") {
  stop_harness h;
  h.first_idle = [&h](test_backend&) { h.source.request_stop(); };
  std::vector<int> results(256, 1);
  h.run(nops_in_scope(&results));
  REQUIRE(h.in_flight_at_first_idle == 256 + 1);  // and the executor's wake-up read
  for (int r : results) REQUIRE(r == -ECANCELED);
  REQUIRE(h.backend->submitted(op_code::nop) == 256);
  REQUIRE(h.backend->submitted(op_code::cancel) == 256);
  REQUIRE(h.backend->outstanding() == 1);  // only the executor's wake-up read is left
}

TEST_CASE("a stop from another thread cancels 256 operations in flight under when_all", "[stop_relay]") {
  stop_harness h;
  std::uint64_t cancels_at_once = 1;
  h.first_idle = [&h, &cancels_at_once](test_backend& b) {
    stop_from_another_thread(h.source);  // the relay posts one message; nothing is cancelled yet
    cancels_at_once = b.submitted(op_code::cancel);
  };
  std::vector<int> results(256, 1);
  h.run(nops_in_when_all(&results));
  REQUIRE(h.in_flight_at_first_idle == 256 + 1);
  REQUIRE(cancels_at_once == 0);
  for (int r : results) REQUIRE(r == -ECANCELED);
  REQUIRE(h.backend->submitted(op_code::cancel) == 256);
  REQUIRE(h.backend->outstanding() == 1);
}

TEST_CASE("a stop reaches the operations of nested scopes", "[stop_relay]") {
  stop_harness h;
  h.first_idle = [&h](test_backend&) { stop_from_another_thread(h.source); };
  std::vector<int> results(64, 1);
  h.run(nested_scopes(&results, 8));
  REQUIRE(h.in_flight_at_first_idle == 64 + 1);
  for (int r : results) REQUIRE(r == -ECANCELED);
  REQUIRE(h.backend->submitted(op_code::cancel) == 64);
  REQUIRE(h.backend->outstanding() == 1);
}

TEST_CASE("under a scope, a cancel that loses the race leaves the target's own result", "[stop_relay]") {
  // The cancel completes first (too late: -EALREADY); the target then completes with its real
  // result, which is what the child must see, and only after both did it resume.
  stop_harness h;
  h.backend->set_cancel_too_late(true);
  h.first_idle = [&h](test_backend&) { h.source.request_stop(); };
  h.later_idle = [](test_backend& b) {
    if (io_op* nop = b.find(op_code::nop)) b.complete(*nop, 7);
  };
  std::vector<int> results(1, 1);
  h.run(nops_in_scope(&results));
  REQUIRE(results[0] == 7);
  REQUIRE(h.backend->submitted(op_code::cancel) == 1);
  REQUIRE(h.backend->outstanding() == 1);
}

TEST_CASE("an operation that completes while the relay's message is on its way keeps its result", "[stop_relay]") {
  // The stop comes from another thread (the relay posts its message) and the nop completes in the
  // same poll. The message then finds the nop finished: no cancel, the target's result stands.
  stop_harness h;
  h.first_idle = [&h](test_backend& b) {
    stop_from_another_thread(h.source);
    b.complete(*b.find(op_code::nop), 5);
  };
  std::vector<int> results(1, 1);
  h.run(nops_in_scope(&results));
  REQUIRE(results[0] == 5);
  REQUIRE(h.backend->submitted(op_code::cancel) == 0);
}

namespace {

// Its nop completes; then, as the child (the group's last) ends, another thread stops the group.
detail::group_child relay_race_child(detail::group* g, std::stop_source* source, int* result, bool* pending_at_end) {
  *result = co_await submit_op(nop_op());  // links into the group's relay, which registers its callback
  stop_from_another_thread(*source);       // the relay posts its message; it cannot run before we end
  *pending_at_end = g->stop_message_pending();
}

task<void> relay_race_group(std::stop_source* source, int* result, bool* pending_at_end, bool* pending_after_join) {
  detail::group g;
  g.link(source->get_token());
  relay_race_child(&g, source, result, pending_at_end).start_in(g);
  co_await g.join();
  *pending_after_join = g.stop_message_pending();
}  // g is destroyed here: the relay's message must have run by now

// The last child to finish stops the scope from another thread as it ends.
task<void> nop_then_stop(std::stop_source* source, int* out, std::size_t* remaining) {
  *out = co_await submit_op(nop_op());
  if (--*remaining == 0) stop_from_another_thread(*source);
}

task<void> scope_racing_its_stop(std::stop_source* source, std::vector<int>* results) {
  scope s;
  std::size_t remaining = results->size();
  for (int& r : *results) s.spawn(nop_then_stop(source, &r, &remaining));
  co_await s.join();
}

}  // namespace

TEST_CASE("a group that ends while its relay's stop message is on its way waits for the message", "[stop_relay]") {
  // The race: a stop from another thread posts the relay's message at the moment the group's last
  // child finishes. The join must not return (and the group must not die) before that message ran.
  test_backend* backend = nullptr;
  executor ex(sluice::test::test_backend_options(backend));
  std::stop_source source;
  int result = 1;
  bool pending_at_end = false;
  bool pending_after_join = true;
  ex.block_on(relay_race_group(&source, &result, &pending_at_end, &pending_after_join));
  REQUIRE(result == 0);
  REQUIRE(pending_at_end);  // the race really happened: the child ended with the message in the inbox
  REQUIRE_FALSE(pending_after_join);
  REQUIRE(backend->submitted(op_code::cancel) == 0);
}

TEST_CASE("a scope whose children end as a stop from another thread arrives joins after the stop message", "[stop_relay]") {
  // The same race through the public scope, with many children.
  test_backend* backend = nullptr;
  executor ex(sluice::test::test_backend_options(backend));
  std::stop_source source;
  std::vector<int> results(32, 1);
  const auto frames = live_frames();
  ex.block_on(with_stop_token(scope_racing_its_stop(&source, &results), source.get_token()));
  for (int r : results) REQUIRE(r == 0);
  REQUIRE(source.stop_requested());
  REQUIRE(backend->submitted(op_code::cancel) == 0);
  REQUIRE(live_frames() == frames);
}

namespace {

task<void> sleep_elsewhere(executor* other, bool* stopped) {
  co_await switch_to(*other);
  const bool elapsed = co_await sleep_for(1h);  // off the group's home: a callback of its own
  *stopped = !elapsed;
}

task<void> stop_scope_with_remote_child(executor* other, bool* stopped) {
  scope s;
  s.spawn(sleep_elsewhere(other, stopped));
  co_await sleep_for(5ms);  // the outcome does not depend on it: before or in flight, it is stopped
  s.request_stop();
  co_await s.join();
}

}  // namespace

TEST_CASE("a child waiting on another executor is stopped through its own callback", "[stop_relay]") {
  engine_options o;
  o.executors = 2;
  o.handle_signals = false;
  engine eng(o);
  bool stopped = false;
  eng.block_on(stop_scope_with_remote_child(&eng.at(1), &stopped));
  REQUIRE(stopped);
}
