// What an executor and its backend count for metrics (io_backend::counters, executor::inbox_depth):
// submissions and the time blocked in the backend's wait, on io_uring and on epoll; messages posted
// and not run yet.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/io_backend.hpp>
#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/timer.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>

using namespace sluice::runtime;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<io_backend> make(const std::string& kind) {
  return kind == "epoll" ? make_epoll_backend() : make_uring_backend();
}

struct counted {
  backend_counters before;
  backend_counters after;
  std::chrono::nanoseconds wall{0};
};

task<void> sleep_and_count(counted* out) {
  executor* ex = executor::current();
  out->before = ex->backend().counters();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) (void)co_await sleep_for(20ms);
  out->wall = std::chrono::steady_clock::now() - start;
  out->after = ex->backend().counters();
}

task<std::size_t> post_and_measure(int n, int* ran) {
  executor* ex = executor::current();
  for (int i = 0; i < n; ++i) ex->post([ran] { ++*ran; });
  const std::size_t depth = ex->inbox_depth();
  (void)co_await sleep_for(1ms);  // the next turns run them
  co_return depth;
}

}  // namespace

TEST_CASE("a backend counts its submissions and the time it was blocked waiting") {
  const std::string kind = GENERATE(std::string("io_uring"), std::string("epoll"));
  INFO(kind);
  executor_options options;
  try {
    options.backend = make(kind);
  } catch (const std::exception& e) {
    WARN("sluice-test-skipped: " << kind << " unavailable: " << e.what());
    return;
  }
  counted c;
  sync_wait(sleep_and_count(&c), std::move(options));
  // Five sleeps: five timeouts submitted, and the executor blocked for most of the 100 ms.
  CHECK(c.after.submitted - c.before.submitted >= 5);
  CHECK(c.after.waits - c.before.waits >= 5);
  const auto idle = c.after.waited - c.before.waited;
  CHECK(idle >= 80ms);
  CHECK(idle <= c.wall);
}

TEST_CASE("inbox_depth counts messages posted and not run yet") {
  int ran = 0;
  const std::size_t depth = sync_wait(post_and_measure(7, &ran));
  CHECK(depth == 7);
  CHECK(ran == 7);  // and then they ran
}
