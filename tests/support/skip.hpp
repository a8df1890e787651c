#pragma once
// SLUICE_SKIP_UNLESS(available, why): ends the test case (it reports itself skipped: ctest's
// SKIP_REGULAR_EXPRESSION matches the line) when `available` is false, saying `why`. The servers'
// headers build their SLUICE_SKIP_WITHOUT_<SERVER>() on it.
#include <cstdio>

#define SLUICE_SKIP_UNLESS(available, why)         \
  do {                                             \
    if (!(available)) {                            \
      std::printf("sluice-test-skipped: %s\n", why); \
      return;                                      \
    }                                              \
  } while (0)
