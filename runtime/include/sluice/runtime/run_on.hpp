#pragma once
// run_on(ex, t): runs task `t` on executor `ex`, then continues on the executor the caller was on.
// For placing work (and the objects it makes, which belong to the executor they are made on) on a
// chosen executor of an engine, from a task on another one.
//
//   auto gate = co_await run_on(&engine.at(1), make_gate());   // made, and owned, on executor 1

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>

#include <cassert>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace sluice::runtime {

template <class T>
task<T> run_on(executor* ex, task<T> t) {
  executor* home = executor::current();
  assert(home != nullptr && "run_on off an executor");
  co_await switch_to(*ex);
  std::exception_ptr failure;
  if constexpr (std::is_void_v<T>) {
    try {
      co_await std::move(t);
    } catch (...) {
      failure = std::current_exception();
    }
    co_await switch_to(*home);  // a failure, too, is rethrown at home
    if (failure) std::rethrow_exception(failure);
  } else {
    std::optional<T> value;
    try {
      value.emplace(co_await std::move(t));
    } catch (...) {
      failure = std::current_exception();
    }
    co_await switch_to(*home);
    if (failure) std::rethrow_exception(failure);
    co_return std::move(*value);
  }
}

}  // namespace sluice::runtime
