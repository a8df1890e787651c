#pragma once
// SLUICE_ASSERT: an invariant check that stays on in every build, Release included.
//
// A failed check writes one error line through the log (file:line, the condition, the message)
// and aborts: crashing is reserved for broken invariants (invariant 9), and a broken invariant
// found in production is worth more than the few cycles the check costs. Use it for cheap checks
// whose failure means the runtime's own state is wrong: ownership by the current executor, credit
// arithmetic, exactly-once recycling. SLUICE_DEBUG_ASSERT is for checks too costly for Release
// (a scan over every channel, say): it compiles to nothing under NDEBUG and never evaluates its
// condition there.
//
//   SLUICE_ASSERT(credits_ > 0, "a data buffer sent without credit");

namespace sluice::runtime::detail {

// Logs "assertion failed at <file>:<line>: <condition>: <message>" and aborts.
[[noreturn]] void assertion_failed(const char* file, int line, const char* condition, const char* message) noexcept;

}  // namespace sluice::runtime::detail

#define SLUICE_ASSERT(cond, msg)                                                                \
  (__builtin_expect(static_cast<bool>(cond), 1)                                                 \
       ? static_cast<void>(0)                                                                   \
       : ::sluice::runtime::detail::assertion_failed(__FILE__, __LINE__, #cond, (msg)))

#ifdef NDEBUG
#define SLUICE_DEBUG_ASSERT(cond, msg) static_cast<void>(false && static_cast<bool>(cond))
#else
#define SLUICE_DEBUG_ASSERT(cond, msg) SLUICE_ASSERT(cond, msg)
#endif
