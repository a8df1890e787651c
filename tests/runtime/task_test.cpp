#include <sluice/runtime/sync_wait.hpp>
#include <sluice/runtime/task.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <string>

using namespace sluice::runtime;

namespace {

task<int> answer() { co_return 42; }

task<int> add_one(int x) { co_return x + 1; }

task<int> chain(int depth) {
  if (depth == 0) co_return 0;
  int below = co_await chain(depth - 1);
  co_return below + 1;
}

task<void> throws_runtime_error(std::string message) {
  throw std::runtime_error(message);
  co_return;
}

task<std::string> catches(std::string message) {
  try {
    co_await throws_runtime_error(message);
  } catch (const std::runtime_error& e) {
    co_return std::string("caught: ") + e.what();
  }
  co_return "not thrown";
}

task<std::unique_ptr<int>> move_only_result() { co_return std::make_unique<int>(7); }

task<void> set_flag(bool* flag) {
  *flag = true;
  co_return;
}

}  // namespace

TEST_CASE("a task yields its value to the awaiter", "[task]") {
  REQUIRE(sync_wait(answer()) == 42);
  REQUIRE(sync_wait(add_one(41)) == 42);
}

TEST_CASE("a task that is never awaited never runs, and its frame is freed", "[task]") {
  const auto before = live_frames();
  bool ran = false;
  {
    auto t = set_flag(&ran);
    REQUIRE(t.valid());
    REQUIRE_FALSE(t.done());  // (clang may elide the frame's allocation, so count only at the end)
  }
  REQUIRE_FALSE(ran);
  REQUIRE(live_frames() == before);
}

TEST_CASE("a million-deep chain of awaits does not grow the stack", "[task]") {
  // GCC 12 does not tail-call symmetric transfer at -O0 or under ASan; the trampoline must.
  REQUIRE(sync_wait(chain(1'000'000)) == 1'000'000);
}

TEST_CASE("an exception thrown in a task propagates to its awaiter", "[task]") {
  REQUIRE(sync_wait(catches("boom")) == "caught: boom");
  REQUIRE_THROWS_WITH(sync_wait(throws_runtime_error("to the top")), "to the top");
}

TEST_CASE("a task can return a move-only value", "[task]") {
  auto p = sync_wait(move_only_result());
  REQUIRE(p);
  REQUIRE(*p == 7);
}

TEST_CASE("tasks are move-only and moving transfers ownership", "[task]") {
  auto a = answer();
  auto b = std::move(a);
  REQUIRE_FALSE(a.valid());
  REQUIRE(b.valid());
  REQUIRE(sync_wait(std::move(b)) == 42);
}

TEST_CASE("no frame is left behind after sync_wait", "[task]") {
  const auto before = live_frames();
  REQUIRE(sync_wait(chain(1000)) == 1000);
  REQUIRE(live_frames() == before);
}
