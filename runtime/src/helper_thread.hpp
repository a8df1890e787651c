#pragma once
// helper_thread: what a thread the runtime starts for itself (the blocking-work pool's, the log's
// writer) does first.

#include <pthread.h>
#include <signal.h>

namespace sluice::runtime::detail {

// Blocks every signal on the calling thread: signals belong to the engine's signalfd (engine.cpp),
// and a helper thread must never be the one the kernel picks to deliver them to.
inline void block_all_signals() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

}  // namespace sluice::runtime::detail
