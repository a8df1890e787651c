// Out of memory where nothing can handle it: a std::bad_alloc in a message an executor runs, or
// one that reaches std::terminate from a noexcept path. With exit_on_unhandled_out_of_memory (the
// sluice tool's main), the process exits 1 with one line naming it, never SIGABRT; any other
// exception still goes to the previous handler. A message that fails for want of memory is never
// dropped with a log line only: what it left undone could hang the job or make it wrong.
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/memory_limit.hpp>
#include <sluice/runtime/task.hpp>

#include <support/death.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <utility>

#include <new>
#include <stdexcept>
#include <string>

namespace rt = sluice::runtime;

struct no_memory_to_format {};

template <>
struct fmt::formatter<no_memory_to_format> : fmt::formatter<int> {
  template <class Context>
  auto format(no_memory_to_format, Context&) const -> decltype(std::declval<Context&>().out()) {
    throw std::bad_alloc();
  }
};

namespace {

rt::task<void> post_then_wait(rt::executor& ex, void (*fn)()) {
  ex.post([fn] { fn(); });
  co_await rt::yield_to_io();
  co_await rt::yield_to_io();
}

void throw_bad_alloc() { throw std::bad_alloc(); }
void throw_logic_error() { throw std::logic_error("a plain failure"); }

void run_posted(void (*fn)()) {
  rt::engine eng({.executors = 1});
  eng.block_on(post_then_wait(eng.at(0), fn));
}

}  // namespace

TEST_CASE("out of memory in a message an executor runs ends the process with exit code 1 naming it") {
  const auto end = sluice::test::run_in_child([] {
    rt::exit_on_unhandled_out_of_memory();
    run_posted(&throw_bad_alloc);
  });
  INFO(end.stderr_text);
  CHECK_FALSE(end.aborted);
  CHECK(end.exit_code == 1);
  CHECK(end.stderr_text.find("sluice: fatal: out of memory (std::bad_alloc)") != std::string::npos);
}

TEST_CASE("without the program's handler out of memory in a message still ends the process") {
  // (Never a log line and on: the message's work is half done.)
  const auto end = sluice::test::run_in_child([] { run_posted(&throw_bad_alloc); });
  CHECK(end.aborted);
}

TEST_CASE("any other exception in a message is logged and the executor goes on") {
  const auto end = sluice::test::run_in_child([] {
    rt::exit_on_unhandled_out_of_memory();
    run_posted(&throw_logic_error);
  });
  CHECK(end.exit_code == 0);
  CHECK(end.stderr_text.find("posted function failed: a plain failure") != std::string::npos);
}

TEST_CASE("the out-of-memory handler leaves any other reason for std::terminate to the handler before it") {
  const auto end = sluice::test::run_in_child([] {
    rt::exit_on_unhandled_out_of_memory();
    try {
      throw std::logic_error("not memory");
    } catch (...) {
      std::terminate();
    }
  });
  CHECK(end.aborted);
  CHECK(end.stderr_text.find("out of memory") == std::string::npos);
}

TEST_CASE("a log line whose formatting runs out of memory costs its values and never throws") {
  // The formatter of `no_memory_to_format` throws std::bad_alloc, as formatting a long argument
  // does when the line cannot be had: the caller goes on, and the format string is written.
  const auto end = sluice::test::run_in_child([] {
    rt::log::error("the value {} is lost", no_memory_to_format{});
    rt::log::error("the next line is whole");
  });
  CHECK(end.exit_code == 0);
  CHECK(end.stderr_text.find("sluice: log: out of memory formatting a line (error): the value {} is lost") !=
        std::string::npos);
  CHECK(end.stderr_text.find("the next line is whole") != std::string::npos);
}
