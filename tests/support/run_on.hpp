#pragma once
// run_on(ex, t): runs task `t` on executor `ex` and comes back; for tests that place objects
// (pools, gates, partitions) on particular executors of an engine.

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>

#include <utility>

namespace sluice::test {

template <class T>
runtime::task<T> run_on(runtime::executor* ex, runtime::task<T> t) {
  runtime::executor* home = runtime::executor::current();
  co_await runtime::switch_to(*ex);
  if constexpr (std::is_void_v<T>) {
    co_await std::move(t);
    co_await runtime::switch_to(*home);
  } else {
    T value = co_await std::move(t);
    co_await runtime::switch_to(*home);
    co_return value;
  }
}

}  // namespace sluice::test
