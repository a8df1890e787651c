#pragma once
// helper_thread: what a thread the runtime starts for itself (the blocking-work pool's, the log's
// writer) does first.

#include <pthread.h>
#include <signal.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>

namespace sluice::runtime::detail {

// Blocks every signal on the calling thread: signals belong to the engine's signalfd (engine.cpp),
// and a helper thread must never be the one the kernel picks to deliver them to.
inline void block_all_signals() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

// Why a thread could not start, for the person who has to fix it: "start <what>: Resource
// temporarily unavailable (its stack needs 8 MiB of address space, and the process's address space
// is limited to 48.8 MiB: ulimit -v 50000; raise ulimit -v, or lower ulimit -s ...)". `err` is
// pthread_create's errno (EAGAIN: no memory for the stack, or the thread limit).
std::string thread_start_failure(std::string_view what, int err);

// A std::system_error whose what() is the message alone (std::system_error would append the
// errno's text a second time).
class described_error final : public std::system_error {
 public:
  described_error(std::error_code code, std::string message)
      : std::system_error(code), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

}  // namespace sluice::runtime::detail
