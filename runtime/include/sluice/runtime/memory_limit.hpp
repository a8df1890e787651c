#pragma once
// What to tell a user whose job ran out of memory: the address-space limit, when one is set.

#include <string>

namespace sluice::runtime {

// "; the address space is limited to N MiB (ulimit -v)" when RLIMIT_AS is set, else "".
std::string address_space_note();

}  // namespace sluice::runtime
