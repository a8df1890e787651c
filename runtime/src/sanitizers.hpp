#pragma once
// Which sanitizer this translation unit is compiled with: GCC defines __SANITIZE_*__, clang
// answers __has_feature. The runtime adapts the few places a sanitizer cannot see through
// (stack switches, descriptors closed by the kernel on io_uring's behalf).

#if defined(__SANITIZE_THREAD__)
#define SLUICE_TSAN_ACTIVE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_TSAN_ACTIVE 1
#endif
#endif
