#include <sluice/runtime/memory_limit.hpp>

#include <fmt/core.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <new>

namespace sluice::runtime {

std::string address_space_note() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::string();
  return fmt::format("; the address space is limited to {} MiB (ulimit -v)", limit.rlim_cur >> 20);
}

namespace {

std::terminate_handler previous_handler = nullptr;

[[noreturn]] void on_terminate() noexcept {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      // Nothing here allocates: the line is formatted on the stack.
      char line[320];
      constexpr std::size_t room = sizeof line - 1;
      auto n = fmt::format_to_n(line, room, "sluice: fatal: out of memory (std::bad_alloc) where nothing could handle it");
      std::size_t size = std::min<std::size_t>(n.size, room);
      rlimit limit{};
      if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
        n = fmt::format_to_n(line + size, room - size, "; the address space is limited to {} MiB (ulimit -v)",
                             limit.rlim_cur >> 20);
        size += std::min<std::size_t>(n.size, room - size);
      }
      n = fmt::format_to_n(line + size, room - size, "; a rerun resumes from the last completed checkpoint");
      size += std::min<std::size_t>(n.size, room - size);
      line[size++] = '\n';
      for (std::size_t done = 0; done < size;) {
        const ssize_t n = ::write(2, line + done, size - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      std::_Exit(1);
    } catch (...) {
    }
  }
  if (previous_handler != nullptr) previous_handler();
  std::abort();
}

}  // namespace

void exit_on_unhandled_out_of_memory() {
  std::terminate_handler before = std::set_terminate(&on_terminate);
  if (before != &on_terminate) previous_handler = before;
}

}  // namespace sluice::runtime
