// stream_task::describe(): one line on where a task is and what it waits for (a hang report).

#include "stream_task.hpp"

#include <fmt/format.h>

namespace sluice::dataflow::detail {

namespace {
const char* phase_name(int p) noexcept {
  static constexpr const char* names[] = {"not started", "restoring", "running", "ending its output",
                                          "waits for the order to finish", "closing", "ended"};
  return names[p];
}
}  // namespace

std::string stream_task::describe() const {
  std::string out = fmt::format("task {} ({}) on executor {}: {}", wiring_.id, wiring_.name, wiring_.executor->id(),
                                phase_name(static_cast<int>(phase_)));
  if (phase_ == phase::ended) return out;
  if (built_.source_ != nullptr) {
    out += source_ended_ ? (finish_requested_ ? "; source ended, told to finish" : "; source ended, waits for the "
                                                                                   "final checkpoint")
                         : "; source producing";
  }
  if (const buffers::input_gate* gate = wiring_.gate) {
    std::size_t ended = 0;
    for (std::uint32_t c = 0; c < gate->channels(); ++c) ended += gate->channel_ended(c) ? 1 : 0;
    out += fmt::format("; input: {} of {} channel(s) ended, {} floating buffer(s) held, {} waiting for one{}", ended,
                       gate->channels(), gate->floating_in_use(), gate->waiting_for_floating(),
                       gate->has_priority() ? ", a priority event queued" : "");
    if (current_channel_ && deserializers_[*current_channel_].has_partial_record()) {
      out += fmt::format(", a record half read on channel {}", *current_channel_);
    }
  }
  if (const buffers::result_partition* p = wiring_.partition) {
    out += p->finished() ? "; output partition ended" : (p->writable() ? "; output writable" : "; output full (no free "
                                                                                                "buffer)");
  }
  if (built_.output_->backlogged()) out += ", output backlogged";
  if (handler_ && handler_->pending() != snapshot::no_checkpoint) {
    out += fmt::format("; checkpoint {} pending{}", handler_->pending(),
                       handler_->aligning() ? " (aligning)" : (handler_->capturing() ? " (capturing)" : ""));
  } else if (handler_) {
    out += fmt::format("; no checkpoint pending (last ended: {})", handler_->last_ended());
  }
  if (!mailbox_.empty()) out += fmt::format("; {} message(s) unread", mailbox_.size());
  if (data_end_reported_) out += "; its end of data reported";
  return out;
}

}  // namespace sluice::dataflow::detail
