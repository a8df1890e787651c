#pragma once
// log_budget: how a flood of similar events is logged without flooding the log. Events come in
// kinds (tcp_transport uses the reasons a connection was refused). In each window of a kind, its
// first `lines_per_window` events are logged one by one; the rest are only counted, with the text of
// the latest, and one summary line reports them once that window is over. So every event is either
// in its own line or in exactly one summary's count, and a kind writes at most lines_per_window + 1
// lines per window, however many events come.
//
// A window of a kind opens at its first event and lasts `window`; the next event after that opens a
// new one. Time is passed in (the owning executor's clock), so a simulation drives it. Owned by one
// executor; the kinds are few (a fixed set of names), and so is the memory.
//
//   log_budget budget(10, std::chrono::seconds(10));
//   if (budget.admit("timeout", now, line)) log::warn("{}", line);
//   for (const log_budget::summary& s : budget.due(now)) log::warn("{} more ...", s.suppressed);

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::buffers {

class log_budget {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  struct summary {
    std::string kind;
    std::uint64_t suppressed = 0;      // events of this kind not logged one by one in the window
    std::chrono::milliseconds window{0};  // how long the window lasted (up to `now` for flush())
    std::string latest;                // the text of the latest of them
  };

  log_budget(std::size_t lines_per_window, std::chrono::milliseconds window) noexcept
      : lines_per_window_(lines_per_window), window_(window) {}

  // One event of `kind` at `now`: true when it is to be logged in full; false when it is counted
  // for the summary instead (`text` kept as the latest). Call due(now) first, so that an ended
  // window's summary comes before the new window's lines.
  bool admit(std::string_view kind, time_point now, std::string_view text);
  // The summaries of the windows that ended by `now` with events suppressed, oldest kind name
  // first; those windows close (the kind's next event opens a new one).
  std::vector<summary> due(time_point now);
  // Every open window's summary (those with events suppressed), at `now`: at the end (close).
  std::vector<summary> flush(time_point now);

  std::uint64_t suppressed_total() const noexcept { return suppressed_total_; }

 private:
  struct state {
    time_point opened{};
    std::size_t logged = 0;
    std::uint64_t suppressed = 0;
    std::string latest;
  };
  bool suppress(state& s, std::string_view text);

  std::size_t lines_per_window_;
  std::chrono::milliseconds window_;
  std::map<std::string, state, std::less<>> open_;
  std::uint64_t suppressed_total_ = 0;
};

}  // namespace sluice::buffers
