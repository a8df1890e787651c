// log_budget (see log_budget.hpp).
#include <sluice/buffers/log_budget.hpp>

namespace sluice::buffers {

bool log_budget::admit(std::string_view kind, time_point now, std::string_view text) {
  auto it = open_.find(kind);
  if (it == open_.end() || now - it->second.opened >= window_) {
    // No window, or an ended one that due() has not closed. One that suppressed events keeps them
    // (and this one) for the summary due() will report; otherwise a new window opens.
    if (it != open_.end() && it->second.suppressed > 0) return suppress(it->second, text);
    it = open_.insert_or_assign(std::string(kind), state{.opened = now}).first;
  }
  state& s = it->second;
  if (s.logged < lines_per_window_) {
    ++s.logged;
    return true;
  }
  return suppress(s, text);
}

bool log_budget::suppress(state& s, std::string_view text) {
  ++s.suppressed;
  ++suppressed_total_;
  s.latest.assign(text);
  return false;
}

std::vector<log_budget::summary> log_budget::due(time_point now) {
  std::vector<summary> out;
  for (auto it = open_.begin(); it != open_.end();) {
    if (now - it->second.opened < window_) {
      ++it;
      continue;
    }
    if (it->second.suppressed > 0) {
      out.push_back({it->first, it->second.suppressed,
                     std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.opened),
                     std::move(it->second.latest)});
    }
    it = open_.erase(it);
  }
  return out;
}

std::vector<log_budget::summary> log_budget::flush(time_point now) {
  std::vector<summary> out;
  for (auto& [kind, s] : open_) {
    if (s.suppressed > 0) {
      out.push_back({kind, s.suppressed, std::chrono::duration_cast<std::chrono::milliseconds>(now - s.opened),
                     std::move(s.latest)});
    }
  }
  open_.clear();
  return out;
}

}  // namespace sluice::buffers
