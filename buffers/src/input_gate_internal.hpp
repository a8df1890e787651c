#pragma once
// Private to the input gate's two source files: credit arithmetic that asserts, and the guard that
// checks the credit identity at a public mutator's exit (input_gate.hpp) in debug builds.

#include <sluice/buffers/input_gate.hpp>
#include <sluice/runtime/assert.hpp>

#include <cstddef>

namespace sluice::buffers {

namespace gate_detail {

// Credit arithmetic: a counter taken below zero means a buffer or credit was counted twice.
inline void take_one(std::size_t& counter, const char* what) noexcept {
  SLUICE_ASSERT(counter > 0, what);
  --counter;
}

}  // namespace gate_detail

struct input_gate::accounting_guard {
  const input_gate* gate;
  ~accounting_guard() { gate->assert_credit_accounting(); }
};

#ifdef NDEBUG
inline void input_gate::assert_credit_accounting() const noexcept {}
#endif

}  // namespace sluice::buffers
