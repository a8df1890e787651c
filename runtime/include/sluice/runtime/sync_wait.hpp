#pragma once
// sync_wait: run a task to completion from ordinary code (main, tests) on a fresh executor that
// lives on the calling thread for the duration of the call. Exceptions propagate.
//
//   int main() { return sluice::runtime::sync_wait(app_main()); }

#include <sluice/runtime/executor.hpp>

namespace sluice::runtime {

template <class T>
T sync_wait(task<T> t, executor_options options = {}) {
  executor ex(std::move(options));
  return ex.block_on(std::move(t));
}

}  // namespace sluice::runtime
