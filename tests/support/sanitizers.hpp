#pragma once
// Test sizes under ThreadSanitizer. TSan checks every access and runs this code several times
// slower; a test whose size only makes rare interleavings likely (millions of records or hops, a
// hundred megabytes of input) runs a tenth of it there, where each interleaving it reaches is
// checked for races anyway. Without it those few tests alone took over 15 minutes of CI time.

#include <cstdint>

namespace sluice::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool under_tsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool under_tsan = true;
#else
inline constexpr bool under_tsan = false;
#endif
#else
inline constexpr bool under_tsan = false;
#endif

// `n`, or a tenth of it under TSan.
constexpr std::uint64_t scaled_for_tsan(std::uint64_t n) { return under_tsan ? n / 10 : n; }

}  // namespace sluice::test
