// GCC 12 reports a false -Wstringop-overflow inside std::string copies inlined at -O3.
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"
#include "tsan_skip.hpp"
#include <sluice/kafka/kafka.hpp>
#include <sluice/runtime/engine.hpp>

#include "mock_cluster.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace rt = sluice::runtime;
namespace df = sluice::dataflow;
namespace sk = sluice::kafka;
using namespace sluice::kafka::test;

namespace {

rt::task<std::size_t> read_to_end(df::source_connector<std::string>* src, df::source_output<std::string>* out) {
  auto o = co_await src->open();
  if (!o) throw std::runtime_error(o.error().message());
  for (;;) {
    auto r = co_await src->read(*out, 64);
    if (!r) throw std::runtime_error(r.error().message());
    if (*r == df::read_status::end) co_return out->records();
    if (*r == df::read_status::idle) co_await src->wait_readable();
  }
}

}  // namespace

TEST_CASE("the mock cluster runs in a helper process that a kafka source reads from") {
  SLUICE_SKIP_KAFKA_UNDER_TSAN();
  mock_cluster_process cluster({"1", "in:2"});
  REQUIRE(!cluster.bootstrap().empty());
  std::vector<std::string> values;
  for (int i = 0; i < 50; ++i) values.push_back("v" + std::to_string(i));
  produce(cluster.bootstrap(), "in", values, [](std::size_t i) { return i % 2; });
  rt::engine_options eo;
  eo.executors = 1;
  eo.handle_signals = false;
  rt::engine eng(eo);
  auto src = sk::make_kafka_source({.brokers = cluster.bootstrap(), .topic = "in", .bounded = true},
                                   context("j", 0, 1));
  vector_collector<std::string> c;
  df::source_output<std::string> out(c);
  CHECK(eng.block_on(read_to_end(src.get(), &out)) == 50);
  eng.block_on(src->close());
}
