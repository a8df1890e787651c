// The world: executors of an engine on one thread, virtual time, files, and reproducibility.

#include <sluice/io/file.hpp>
#include <sluice/runtime/engine.hpp>
#include <sluice/runtime/timer.hpp>
#include <sluice/runtime/when_all.hpp>
#include <sluice/sim/world.hpp>

#include <catch2/catch.hpp>

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

}  // namespace

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
