#pragma once
// Tests use the runtime's run_on (runtime/run_on.hpp) under this name.
#include <sluice/runtime/run_on.hpp>

namespace sluice::test {
using runtime::run_on;
}
