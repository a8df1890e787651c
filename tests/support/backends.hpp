#pragma once
// Executor options for running one test on either backend: the real io_uring, or the deterministic
// test_backend (virtual time, fault injection). With GENERATE a test runs on both:
//
//   const auto kind = GENERATE(backend_kind::uring, backend_kind::test);
//   sync_wait(body(), backend_options(kind));

#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/test_backend.hpp>

#include <memory>

namespace sluice::test {

enum class backend_kind { uring, test };

inline const char* to_string(backend_kind kind) noexcept { return kind == backend_kind::uring ? "io_uring" : "test"; }

inline runtime::executor_options backend_options(backend_kind kind) {
  runtime::executor_options options;
  if (kind == backend_kind::test) options.backend = std::make_unique<runtime::test_backend>();
  return options;
}

// The deterministic backend: sleeps take no real time (virtual clock), completion order is fixed.
inline runtime::executor_options virtual_time() { return backend_options(backend_kind::test); }

// A test_backend the test keeps a pointer to (for fault rules and counters) while the executor owns it.
inline runtime::executor_options test_backend_options(runtime::test_backend*& backend) {
  auto owned = std::make_unique<runtime::test_backend>();
  backend = owned.get();
  runtime::executor_options options;
  options.backend = std::move(owned);
  return options;
}

}  // namespace sluice::test
