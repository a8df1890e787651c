#pragma once
// What to tell a user whose job ran out of memory: the address-space limit, when one is set; and
// how a program ends when out of memory reached std::terminate.

#include <string>

namespace sluice::runtime {

// "; the address space is limited to N MiB (ulimit -v)" when RLIMIT_AS is set, else "".
std::string address_space_note();

// For a program (the sluice tool): out of memory where nothing could handle it (a std::bad_alloc
// that reaches std::terminate: a noexcept path, a thread's top, a message an executor ran) ends the
// process with exit code 1 and one line on stderr naming it and the limit, in place of SIGABRT. A
// job is as safe as after a kill -9: its rerun resumes from the last completed checkpoint. Any other
// exception goes on to the handler installed before.
void exit_on_unhandled_out_of_memory();

}  // namespace sluice::runtime
