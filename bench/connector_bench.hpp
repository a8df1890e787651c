#pragma once
// What the connector benchmarks (nats, postgres, kafka) share: a sink driven through its commit
// path and a bounded source read to its end, the way a job's tasks drive them, on one executor.
//
// - drive_sink: write() n records, precommit(id) + commit(id) after every `per_checkpoint` of them
//   and after the last (a checkpoint's work, without the checkpoint's own files), with the ids after
//   `after_checkpoint`. recover() is the
//   caller's, outside the timing: it is connection set-up.
// - drain_source: open() and read() (wait_readable() when idle) until the bounded source says end.
// Both run on an engine of one executor that leaves signals alone (the benchmark's thread blocks on
// it: engine::block_on), made with {.executors = 1, .handle_signals = false}.
// Failures throw std::runtime_error naming the step, which `sluice bench` prints.

#include "bench.hpp"

#include <sluice/dataflow/connector.hpp>
#include <sluice/io/result.hpp>
#include <sluice/runtime/task.hpp>

#include <fmt/core.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::bench::connectors {

template <class R>
R must(io::result<R> r, const std::string& step) {
  if (!r) throw std::runtime_error(step + ": " + r.error().message());
  if constexpr (std::is_void_v<R>) {
    return;
  } else {
    return std::move(r).value();
  }
}

template <class T>
struct counting_collector final : dataflow::collector<T> {
  void collect(const T&) override {}
  void watermark(std::uint64_t) override {}
  void end_of_data() override {}
};

template <class T>
runtime::task<void> drive_sink(dataflow::sink_connector<T>* sink, std::uint64_t n, std::uint64_t per_checkpoint,
                               std::function<T(std::uint64_t)> record, std::uint64_t after_checkpoint) {
  std::uint64_t checkpoint = after_checkpoint;  // the ids go on from there
  for (std::uint64_t i = 0; i < n; ++i) {
    auto w = co_await sink->write(record(i));
    must(std::move(w), "sink write");
    if ((i + 1) % per_checkpoint == 0 || i + 1 == n) {
      ++checkpoint;
      auto p = co_await sink->precommit(checkpoint);
      (void)must(std::move(p), "sink precommit " + std::to_string(checkpoint));
      auto c = co_await sink->commit(checkpoint);
      must(std::move(c), "sink commit " + std::to_string(checkpoint));
    }
  }
}

template <class T>
runtime::task<std::uint64_t> drain_source(dataflow::source_connector<T>* source) {
  auto opened = co_await source->open();
  must(std::move(opened), "source open");
  counting_collector<T> sink;
  dataflow::source_output<T> out(sink);
  for (;;) {
    auto status = co_await source->read(out, 1024);
    const auto s = must(std::move(status), "source read");
    if (s == dataflow::read_status::end) break;
    if (s == dataflow::read_status::idle) co_await source->wait_readable();
  }
  co_return out.records();
}

// One result line: "<what>: <figure>/s records  baseline (<baseline>) <rate>/s  ratio R  (<detail>, medians
// of N)", with the JSON fields records_per_s, baseline_records_per_s, ratio, records, per_checkpoint, runs
// and `more`.
inline void report(const reporter& out, std::string_view bench, std::string_view what, std::string_view baseline,
                   const paired_result& r, std::string_view detail, std::uint64_t records, std::uint64_t per_checkpoint,
                   unsigned runs, std::vector<field> more) {
  out.result(bench,
             fmt::format("{}: {}/s records  baseline ({}) {}/s  ratio {:.2f}  ({}, {} per checkpoint, medians of {})", what,
                         human_rate(r.figure), baseline, human_rate(r.baseline), r.figure / r.baseline, detail,
                         per_checkpoint, runs),
             [&] {
               more.push_back({"records_per_s", r.figure});
               more.push_back({"baseline_records_per_s", r.baseline});
               more.push_back({"ratio", r.figure / r.baseline});
               more.push_back({"records", records});
               more.push_back({"per_checkpoint", per_checkpoint});
               more.push_back({"runs", std::uint64_t{runs}});
               return more;
             }());
}

}  // namespace sluice::bench::connectors
