// stream_task (stream_task.hpp): its part in a checkpoint: the barrier handler's actions carried
// out, and what a checkpoint takes of it (checkpoint_subject): operator states, the sink's staged
// output, the output backlog and the input not yet consumed.

#include "stream_task.hpp"

#include <sluice/runtime/log.hpp>
#include <sluice/runtime/plant.hpp>

#include <fmt/core.h>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

rt::task<io::result<void>> stream_task::perform(ss::barrier_actions actions) {
  for (ss::barrier_action& action : actions) {
    if (auto* t = std::get_if<ss::trigger_snapshot>(&action)) {
      io::result<void> r = co_await snapshot(t->id, t->mode);
      if (!r) co_return r;
    } else if (auto* c = std::get_if<ss::capture_input>(&action)) {
      checkpoint_.capture(c->id, c->channel, std::move(c->views));
    } else if (auto* f = std::get_if<ss::finish_input>(&action)) {
      checkpoint_.finish_input(f->id);
    } else if (auto* a = std::get_if<ss::abort_checkpoint>(&action)) {
      io::result<void> r = co_await checkpoint_.decline(a->id, a->reason, a->detail);
      if (!r) co_return r;
    }
  }
  co_return io::result<void>();
}

// Flushables (combiners) first, upstream first: what they held goes downstream ahead of the barrier
// (drained before it, aligned; output channel state or backlog, unaligned), so their state is empty.
// One pass more per tee: a branch's combiner may sit before the tee's upstream one in the order.
rt::task<io::result<void>> stream_task::snapshot(ss::checkpoint_id id, ss::checkpoint_mode mode) {
  if (!built_.flushables_.empty()) {
    auto flushed = in_chain([this] {
      for (std::size_t pass = 0; pass < built_.flush_passes_; ++pass) {
        for (auto it = built_.flushables_.rbegin(); it != built_.flushables_.rend(); ++it) (*it)->flush();
      }
    });
    co_await std::move(flushed);
  }
  co_return co_await checkpoint_.take(id, mode, wiring_.storage->checkpoint_dir(id));
}

// --- what a checkpoint takes (checkpoint_subject) ---------------------------------------------------

ss::taken_state stream_task::operator_states(ss::checkpoint_id id) {
  ss::taken_state ops;
  for (std::uint32_t i = 0; i < built_.states_.size(); ++i) {
    ops.now.push_back({i, built_.states_[i]->snapshot_state()});
    // A keyed table's entries follow in slices while the task goes on (task_checkpoint::write_deferred):
    // the barrier costs O(1) in the table's size.
    if (auto rest = built_.states_[i]->snapshot_rest(id)) ops.later.push_back({i, std::move(rest)});
  }
  if (built_.source_ != nullptr) ops.now.push_back({source_index, built_.source_->snapshot_state()});
  return ops;
}

rt::task<io::result<std::vector<std::byte>>> stream_task::sink_state(ss::checkpoint_id id) {
  co_return co_await built_.output_->snapshot(id);
}

void stream_task::fail_task(io::error error) {
  if (!deferred_failure_) deferred_failure_ = std::move(error);
  wake_.set();
}

std::optional<std::vector<std::byte>> stream_task::output_backlog() const {
  const auto* tail = dynamic_cast<const backlog_source*>(built_.output_);
  if (tail == nullptr) return std::nullopt;
  return tail->backlog_state();
}

// Per channel: a half-read record (its first part is in no buffer any more), or the unread rest of
// the buffer being processed; a record is half read only once its buffer is used up.
std::vector<ss::checkpoint_subject::unconsumed_input> stream_task::unconsumed() {
  std::vector<unconsumed_input> out;
  for (std::uint32_t c = 0; c < deserializers_.size(); ++c) {
    const bf::record_deserializer& des = deserializers_[c];
    unconsumed_input in;
    in.channel = c;
    if (des.has_partial_record()) {
      // Planted: the part of a record a buffer ended in is left out of the snapshot.
      if (!SLUICE_PLANTED("snapshot-mid-record")) in.partial = des.partial_record();
    } else if (current_channel_ == c) {
      in.rest = des.unconsumed().rest;
    }
    if (!in.partial.empty() || in.rest) out.push_back(std::move(in));
  }
  return out;
}

}  // namespace sluice::dataflow::detail
