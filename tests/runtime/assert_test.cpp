// SLUICE_ASSERT stays on in every build; SLUICE_DEBUG_ASSERT only without NDEBUG.
#include <sluice/runtime/assert.hpp>

#include <support/death.hpp>

#include <catch2/catch.hpp>

#include <string>

TEST_CASE("a failed SLUICE_ASSERT logs file:line, the condition and the message, and aborts in every build",
          "[assert]") {
  const auto end = sluice::test::run_in_child([] {
    volatile int two = 2;
    SLUICE_ASSERT(two + 1 == 4, "arithmetic is broken");
  });
  CHECK(end.aborted);
  CHECK(end.stderr_text.find("assertion failed at ") != std::string::npos);
  CHECK(end.stderr_text.find("assert_test.cpp:") != std::string::npos);
  CHECK(end.stderr_text.find("two + 1 == 4") != std::string::npos);
  CHECK(end.stderr_text.find("arithmetic is broken") != std::string::npos);
}

TEST_CASE("a SLUICE_ASSERT that holds costs nothing but the check", "[assert]") {
  const auto end = sluice::test::run_in_child([] {
    volatile int two = 2;
    SLUICE_ASSERT(two + 2 == 4, "never printed");
  });
  CHECK_FALSE(end.aborted);
  CHECK(end.exit_code == 0);
  CHECK(end.stderr_text.empty());
}

TEST_CASE("SLUICE_DEBUG_ASSERT evaluates its condition only in debug builds", "[assert]") {
  int evaluated = 0;
  SLUICE_DEBUG_ASSERT(++evaluated == 1, "counted once");
#ifdef NDEBUG
  CHECK(evaluated == 0);
#else
  CHECK(evaluated == 1);
#endif
}
