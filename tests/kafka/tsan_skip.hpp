#pragma once
// librdkafka starts its threads with C11 thrd_create, which GCC 12's ThreadSanitizer does not
// intercept: the first allocation on such a thread crashes inside TSan's allocator (seen in the
// mock cluster's thread). So the tests that start librdkafka report themselves skipped under TSan;
// the ASan+UBSan and Release runs still run them.
#include <cstdio>

#if defined(__SANITIZE_THREAD__)
#define SLUICE_SKIP_KAFKA_UNDER_TSAN()                                                              \
  do {                                                                                              \
    std::printf("sluice-test-skipped: librdkafka's threads (C11 thrd_create) are not intercepted by " \
                "ThreadSanitizer\n");                                                              \
    return;                                                                                         \
  } while (false)
#else
#define SLUICE_SKIP_KAFKA_UNDER_TSAN() \
  do {                                 \
  } while (false)
#endif
