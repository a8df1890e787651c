#include <sluice/runtime/channel.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/semaphore.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/test_backend.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/runtime/when_any.hpp>

#include <support/backends.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace sluice::runtime;
using namespace std::chrono_literals;
using sluice::test::virtual_time;

namespace {

task<void> wait_and_record(event* e, std::vector<int>* order, int id) {
  bool set = co_await e->wait();
  if (set) order->push_back(id);
}

// Sets the event, then records what ran synchronously: waiters must not have run yet.
task<void> set_and_check(event* e, std::vector<int>* order, std::size_t* seen_inline) {
  co_await yield();
  e->set();
  *seen_inline = order->size();
}

task<std::size_t> event_fifo(std::vector<int>* order) {
  event e;
  std::size_t seen_inline = 99;
  co_await when_all(wait_and_record(&e, order, 1), wait_and_record(&e, order, 2), wait_and_record(&e, order, 3),
                    set_and_check(&e, order, &seen_inline));
  co_return seen_inline;
}

task<bool> wait_on(event* e) { co_return co_await e->wait(); }

task<bool> event_wait_stopped() {
  event e;
  auto r = co_await with_timeout(wait_on(&e), 5ms);
  co_return r.has_value();
}

}  // namespace

TEST_CASE("an event wakes its waiters in FIFO order by scheduling, not by calling them", "[event]") {
  std::vector<int> order;
  REQUIRE(sync_wait(event_fifo(&order)) == 0);  // set() returned before any waiter ran
  REQUIRE(order == std::vector<int>{1, 2, 3});
}

TEST_CASE("a set event does not suspend, and a reset one does", "[event]") {
  event e(true);
  REQUIRE(e.wait().await_ready());
  e.reset();
  REQUIRE_FALSE(e.wait().await_ready());
}

TEST_CASE("waiting on an event ends with false when the waiter is stopped", "[event]") {
  REQUIRE_FALSE(sync_wait(event_wait_stopped(), virtual_time()));
}

namespace {

task<void> hold_permit(semaphore* s, int* inside, int* max_inside, std::vector<int>* order, int id) {
  const bool acquired = co_await s->acquire();
  if (!acquired) co_return;
  order->push_back(id);
  ++*inside;
  *max_inside = std::max(*max_inside, *inside);
  co_await sleep_for(std::chrono::milliseconds(1));
  --*inside;
  s->release();
}

task<int> semaphore_bound(std::vector<int>* order) {
  semaphore s(2);
  int inside = 0;
  int max_inside = 0;
  std::vector<task<void>> tasks;
  for (int i = 0; i < 10; ++i) tasks.push_back(hold_permit(&s, &inside, &max_inside, order, i));
  co_await when_all(std::move(tasks));
  REQUIRE(s.available() == 2);
  co_return max_inside;
}

task<bool> acquire_then_check(semaphore* s) { co_return co_await s->acquire(); }

task<void> release_then_try(semaphore* s, std::vector<bool>* out) {
  co_await yield();
  s->release();
  out->push_back(s->try_acquire());
}

task<std::vector<bool>> semaphore_no_barging() {
  semaphore s(0);
  std::vector<bool> out;
  // A waiter queues first; a release hands the permit to it, so try_acquire right after fails.
  auto waiter = acquire_then_check(&s);
  auto r = co_await when_all(std::move(waiter), release_then_try(&s, &out));
  out.push_back(std::get<0>(r));
  co_return out;
}

}  // namespace

TEST_CASE("a semaphore bounds concurrency and serves waiters in FIFO order", "[semaphore]") {
  std::vector<int> order;
  REQUIRE(sync_wait(semaphore_bound(&order), virtual_time()) == 2);
  REQUIRE(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("a released permit goes to the longest waiter, not to a later try_acquire", "[semaphore]") {
  auto out = sync_wait(semaphore_no_barging());
  REQUIRE(out == std::vector<bool>{false, true});
}

namespace {

task<void> produce(channel<int>* c, int from, int count, std::vector<std::size_t>* sizes) {
  for (int i = from; i < from + count; ++i) {
    const bool sent = co_await c->send(i);
    REQUIRE(sent);
    sizes->push_back(c->size());
  }
}

task<std::vector<int>> consume(channel<int>* c, int count) {
  std::vector<int> got;
  for (int i = 0; i < count; ++i) {
    co_await sleep_for(std::chrono::microseconds(10));
    auto v = co_await c->receive();
    REQUIRE(v.has_value());
    got.push_back(*v);
  }
  co_return got;
}

task<std::vector<int>> channel_round_trip(std::vector<std::size_t>* sizes) {
  channel<int> c(4);
  auto [unused, got] = co_await when_all(produce(&c, 0, 100, sizes), consume(&c, 100));
  (void)unused;
  co_return got;
}

task<std::vector<int>> drain_after_close() {
  channel<int> c(8);
  for (int i = 0; i < 3; ++i) {
    const bool sent = co_await c.send(i);
    REQUIRE(sent);
  }
  c.close();
  const bool sent_after_close = co_await c.send(99);
  REQUIRE_FALSE(sent_after_close);
  std::vector<int> got;
  while (auto v = co_await c.receive()) got.push_back(*v);
  co_return got;
}

task<bool> blocked_receiver(channel<int>* c) { co_return (co_await c->receive()).has_value(); }
task<void> close_later(channel<int>* c) {
  co_await yield();
  c->close();
}
task<bool> close_wakes_receiver() {
  channel<int> c(1);
  auto [got, unused] = co_await when_all(blocked_receiver(&c), close_later(&c));
  (void)unused;
  co_return got;
}

task<bool> blocked_sender(channel<int>* c) { co_return co_await c->send(2); }
task<std::size_t> sender_stopped() {
  channel<int> c(1);
  const bool sent = co_await c.send(1);
  REQUIRE(sent);
  auto r = co_await with_timeout(blocked_sender(&c), 5ms);
  REQUIRE_FALSE(r.has_value());
  co_return c.size();
}

}  // namespace

TEST_CASE("a bounded channel delivers every value in order and never exceeds its capacity", "[channel]") {
  std::vector<std::size_t> sizes;
  auto got = sync_wait(channel_round_trip(&sizes), virtual_time());
  REQUIRE(got.size() == 100);
  for (int i = 0; i < 100; ++i) REQUIRE(got[i] == i);
  for (auto s : sizes) REQUIRE(s <= 4);
}

TEST_CASE("a closed channel refuses sends and drains what it holds", "[channel]") {
  REQUIRE(sync_wait(drain_after_close()) == std::vector<int>{0, 1, 2});
}

TEST_CASE("closing a channel wakes a blocked receiver with nothing", "[channel]") {
  REQUIRE_FALSE(sync_wait(close_wakes_receiver()));
}

TEST_CASE("a stopped sender leaves the channel unchanged", "[channel]") {
  REQUIRE(sync_wait(sender_stopped(), virtual_time()) == 1);
}
