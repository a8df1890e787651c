// Catch2's main(), compiled once and linked into every test binary.
//
// Catch2 is not thread-safe, so every assertion runs on the test's main thread: code on an
// executor thread (an engine's, a std::thread) records what it saw, and the test asserts on it
// afterwards. The listener below makes an assertion on any other thread end the run loudly, naming
// it, instead of racing on Catch2's state.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

// Initialised before main(), on the main thread. A forked child's only thread has the same id.
const std::thread::id main_thread = std::this_thread::get_id();

struct assertions_on_main_thread : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void assertionStarting(Catch::AssertionInfo const& info) override {
    if (std::this_thread::get_id() == main_thread) return;
    std::fprintf(stderr,
                 "%s:%zu: %.*s(%.*s) ran off the test's main thread; Catch2 is not thread-safe: record the "
                 "value there and assert on the main thread\n",
                 info.lineInfo.file, info.lineInfo.line, static_cast<int>(info.macroName.size()),
                 info.macroName.data(), static_cast<int>(info.capturedExpression.size()),
                 info.capturedExpression.data());
    std::abort();
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(assertions_on_main_thread)
