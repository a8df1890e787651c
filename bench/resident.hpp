#pragma once
// Resident memory a piece of work adds: `work` runs in a forked child, and the child's peak resident
// set (VmHWM, reset when it starts) less its resident set when it started is what the work added
// at its peak. The parent's memory is not counted (the child starts with it resident and only copies
// pages it writes), and whatever the work allocates dies with the child, so measurements do not
// disturb each other or the timed runs. The caller must have no other threads running work that
// the child would need (the child has only the calling thread).

#include <cstdint>
#include <functional>

namespace sluice::bench {

// Bytes of resident memory `work` added at its peak, run in a forked child. Throws
// std::runtime_error if the fork fails or the work fails in the child (its exception's message).
std::uint64_t peak_resident_growth_bytes(const std::function<void()>& work);

}  // namespace sluice::bench
