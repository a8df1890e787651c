#include <sluice/snapshot/checkpoint.hpp>

namespace sluice::snapshot {

std::string_view to_string(checkpoint_mode mode) noexcept {
  switch (mode) {
    case checkpoint_mode::aligned: return "aligned";
    case checkpoint_mode::unaligned: return "unaligned";
    case checkpoint_mode::aligned_timeout: return "aligned-timeout";
    case checkpoint_mode::at_least_once: return "at-least-once";
  }
  return "unknown";
}

std::string_view to_string(abort_reason reason) noexcept {
  switch (reason) {
    case abort_reason::subsumed: return "subsumed";
    case abort_reason::declined: return "declined";
    case abort_reason::io_error: return "io-error";
    case abort_reason::cancelled: return "cancelled";
    case abort_reason::expired: return "expired";
    case abort_reason::not_ready: return "not-ready";
    case abort_reason::cancelled_by_barrier: return "cancelled-by-barrier";
    case abort_reason::coordinator: return "aborted-by-coordinator";
  }
  return "unknown";
}

}  // namespace sluice::snapshot
