// An executor may be destroyed as a consequence of a message whose poster is still inside
// post_node: the wake-up write comes after the message is published, so the owner can wake (on
// that very write), run the message, return and destroy itself before the poster has left.
//
// The race is forced, not waited for: this binary interposes ::write, and a thread that arms
// `hold_after_write` is held right after its next write (the eventfd write of a wake-up), that is
// inside post_node after the message is out.

#include <sluice/runtime/executor.hpp>

#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

constexpr auto hold_for = 300ms;

struct held_write {
  std::atomic<bool> destroyed{false};  // set by the owner thread once ~executor has returned
  bool was_held = false;               // the rest: written by the held thread only
  bool destroyed_while_held = false;
};

thread_local held_write* hold_after_write = nullptr;

void hold(held_write& h) {
  h.was_held = true;
  // The owner is awake now. Give it time to run the message, return and destroy its executor.
  const auto until = std::chrono::steady_clock::now() + hold_for;
  while (!h.destroyed.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  h.destroyed_while_held = h.destroyed.load();
}

}  // namespace

extern "C" ssize_t write(int fd, const void* buf, size_t count) {
  using write_fn = ssize_t (*)(int, const void*, size_t);
  static const auto real = reinterpret_cast<write_fn>(::dlsym(RTLD_NEXT, "write"));
  const ssize_t rc = real(fd, buf, count);
  if (held_write* h = hold_after_write) {
    hold_after_write = nullptr;
    hold(*h);
  }
  return rc;
}

namespace {

// One attempt: an executor sleeps on its own thread; this thread posts the message that makes it
// return, and is held inside that post. Returns what the held thread saw.
void post_the_last_message(held_write& h) {
  bool done = false;  // owner thread only: set by the message, read by the loop
  std::promise<executor*> ready;
  std::thread owner([&h, &ready, &done] {
    auto ex = std::make_unique<executor>();
    ready.set_value(ex.get());
    ex->run_until([](void* d) noexcept { return *static_cast<bool*>(d); }, &done);
    ex.reset();
    h.destroyed.store(true);
  });
  executor* ex = ready.get_future().get();
  // Let it fall asleep (no inbox traffic yet, so it does not spin first). Were it still awake, the
  // post would take the fast path without a write, and nothing would be held.
  std::this_thread::sleep_for(20ms);
  hold_after_write = &h;
  ex->post([&done] { done = true; });
  hold_after_write = nullptr;
  owner.join();
}

}  // namespace

TEST_CASE("an executor destroyed right after a posted message ran waits for its poster to leave post_node",
          "[executor]") {
  int held = 0;
  int destroyed_while_held = 0;
  for (int attempt = 0; attempt < 5 && held == 0; ++attempt) {
    held_write h;
    post_the_last_message(h);
    REQUIRE(h.destroyed.load());
    if (!h.was_held) continue;  // the owner was awake: no wake-up write to hold
    ++held;
    if (h.destroyed_while_held) ++destroyed_while_held;
  }
  REQUIRE(held > 0);
  CHECK(destroyed_while_held == 0);
}
