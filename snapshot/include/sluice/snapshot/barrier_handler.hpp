#pragma once
// barrier_handler: the per-task state machine that turns the barriers, cancellation markers and
// end-of-partition items a task takes from its input gate(s) into checkpoint actions.
//
// Protocol. The task's mailbox loop takes an item from a gate and, before processing it, hands it
// to `on_item(item, gate)`; the handler updates its state (and blocks / unblocks gate channels)
// and RETURNS actions, in order, which the task carries out before it takes the next item. The
// handler never calls into the task (invariant 3). The actions:
//   trigger_snapshot{id, mode}   snapshot operator state now and forward barrier `id` downstream
//                                (unaligned: as a priority event, and start the channel-state
//                                writer first; the overtaken output views are output channel state)
//   capture_input{id, gate, channel, views}   input channel state of `id`, in channel order
//   finish_input{id}             every input channel's state of `id` is captured
//   abort_checkpoint{id, reason, detail}      tell the writer / coordinator; forward a
//                                cancellation marker for `id` downstream
// Data items must be handed over too while `is_capturing(channel, gate)`: the handler captures a
// view (no copy) and the task then processes the data normally.
//
// Modes (handler_options::mode):
// - aligned: block each channel at its barrier; when every live channel delivered it, unblock all
//   and trigger. Never any channel state (scenario 13).
// - unaligned: trigger at the first barrier. From then on, until a channel's barrier is taken, each
//   data buffer taken from it is captured; when a PRIORITY barrier is taken, the data queued on
//   its channel (which it overtook, sent before it) is captured too. An in-band barrier overtook
//   nothing. So the channel state is exactly the data between each channel's position at the
//   snapshot and its barrier, whether that barrier is in-band or priority (scenario 10).
// - aligned_timeout: aligned until the alignment lasts `alignment_timeout` (checked by on_timer(), and
//   on each item), or a priority barrier arrives (the upstream switched): then unblock all and
//   continue as unaligned. Blocked channels already delivered their barrier, so what is queued
//   behind it is NOT channel state; the others are captured as above. The alignment starts at the
//   first barrier or barrier ANNOUNCEMENT taken: an upstream that queues a barrier in-band sends an
//   announcement with priority ahead of its data (task_checkpoint), so the timeout counts from when
//   the barrier was sent, not from when it is reached. At the switch, every barrier queued in the
//   gate behind data is promoted (input_gate::promote_barrier): it overtakes that data, which is
//   captured as channel state, so the checkpoint never waits for the task to work through it.
//   A trigger after an alignment that did not switch says aligned_timeout, so the task's own
//   in-band barrier may switch downstream in turn.
// - at_least_once: never blocks; triggers once every live channel delivered the barrier.
// One checkpoint at a time: a newer barrier or marker aborts the pending one (subsumed); barriers
// and markers of ids at or below the last finished / aborted id are ignored (scenario 5). A barrier
// taken while replaying recovered channel state is declined not_ready (scenario 11). Bookkeeping is
// one checkpoint's per-channel flags, whatever the ids seen (scenario 14). The handler keeps no
// buffer views itself: every view it creates goes out in a capture_input.
// A channel that fails before its barrier declines the pending checkpoint (its pre-barrier data may
// be lost); end-of-partition just stops it counting. After gate.release_channel(c), hand the
// handler a channel_failed item for c. Limits: at-least-once tracks one checkpoint (a barrier N+1
// before every N is in subsumes N); a priority barrier's overtaken data is what is queued on its
// channel when the task takes it, so the task must take it before more data is delivered behind
// it (next() yields priority events first; gate_item::overtaken says how many buffers it passed).
//
//   barrier_handler handler(gate, {.mode = checkpoint_mode::unaligned});
//   while (auto item = co_await gate.next()) {
//     for (barrier_action& a : handler.on_item(*item)) carry_out(a);
//     if (!item->is_event()) process(item->data);
//   }

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/input_gate.hpp>
#include <sluice/snapshot/checkpoint.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sluice::snapshot {

using handler_clock = std::chrono::steady_clock;

// Per checkpoint, for the coordinator's statistics. Alignment runs from the first barrier to the
// last one (or to the end of the checkpoint at this task).
struct alignment_stats {
  checkpoint_id id = no_checkpoint;
  checkpoint_mode mode = checkpoint_mode::aligned;  // as it ended: aligned, unaligned, at_least_once
  handler_clock::time_point alignment_start{};
  handler_clock::time_point alignment_end{};
  std::uint64_t captured_bytes = 0;
  std::uint64_t captured_buffers = 0;
  bool timed_out = false;  // aligned_timeout switched to unaligned
  // When it switched to capturing (unaligned at once, or aligned_timeout after its timeout or at a
  // priority barrier); epoch if it never did. The simulation's alignment oracle reads it.
  handler_clock::time_point switched_at{};
  handler_clock::duration alignment_duration() const noexcept { return alignment_end - alignment_start; }
};

struct trigger_snapshot {
  checkpoint_id id = no_checkpoint;
  // aligned, unaligned or at_least_once; aligned_timeout for an aligned_timeout alignment that
  // completed aligned (the task's own barrier may still switch downstream).
  checkpoint_mode mode = checkpoint_mode::aligned;
};
struct capture_input {
  checkpoint_id id = no_checkpoint;
  std::uint32_t gate = 0;
  std::uint32_t channel = 0;
  std::vector<buffers::buffer_view> views;  // oldest first
};
struct finish_input {
  checkpoint_id id = no_checkpoint;
};
struct abort_checkpoint {
  checkpoint_id id = no_checkpoint;
  abort_reason reason = abort_reason::declined;
  std::string detail;
};
using barrier_action = std::variant<trigger_snapshot, capture_input, finish_input, abort_checkpoint>;
using barrier_actions = std::vector<barrier_action>;

struct handler_options {
  checkpoint_mode mode = checkpoint_mode::aligned;
  std::chrono::milliseconds alignment_timeout{0};  // aligned_timeout only; 0 = unaligned at once
};

class barrier_handler {
 public:
  // Over one gate, or over several (a two-input task): `gate` in the calls below is the index in
  // `gates`. On the gates' executor. Throws std::invalid_argument without gates, for gates of
  // different executors, or for a negative timeout.
  barrier_handler(buffers::input_gate& gate, handler_options options);
  barrier_handler(std::vector<buffers::input_gate*> gates, handler_options options);
  barrier_handler(const barrier_handler&) = delete;
  barrier_handler& operator=(const barrier_handler&) = delete;

  // Every item taken from gate `gate`: barriers, markers, end-of-partition and channel failures
  // change the state; data is captured while its channel is capturing; other items are ignored.
  barrier_actions on_item(buffers::gate_item& item, std::uint32_t gate = 0);
  bool is_capturing(std::uint32_t channel, std::uint32_t gate = 0) const;

  // aligned_timeout: when the alignment must switch to unaligned; the task arms a timer for it and
  // calls on_timer() (which reads the executor clock) when it fires. nullopt when not aligning.
  std::optional<handler_clock::time_point> deadline() const noexcept;
  barrier_actions on_timer();

  // While replaying recovered channel state, barriers are declined not_ready (scenario 11);
  // turning it on aborts a pending checkpoint the same way.
  barrier_actions set_replaying(bool replaying);
  // The coordinator (or the writer, on an I/O error) ended checkpoint `id`: forget it and ignore
  // its later barriers. Yields an abort action only for the pending checkpoint or a newer one.
  barrier_actions abort(checkpoint_id id, abort_reason reason, std::string detail);

  // --- introspection -------------------------------------------------------------------------
  checkpoint_id pending() const noexcept { return pending_; }            // no_checkpoint if none
  checkpoint_id last_ended() const noexcept { return last_ended_; }      // finished or aborted
  bool aligning() const noexcept { return phase_ == phase::aligning; }
  bool capturing() const noexcept { return phase_ == phase::capturing; }
  bool replaying() const noexcept { return replaying_; }
  std::size_t tracked_checkpoints() const noexcept { return pending_ == no_checkpoint ? 0 : 1; }
  // Bytes of per-checkpoint bookkeeping: fixed at construction (scenario 14).
  std::size_t bookkeeping_bytes() const noexcept { return channels_.capacity() * sizeof(channel_info); }
  // The stats of the last checkpoint that finished here (triggered aligned / finished input).
  const std::optional<alignment_stats>& last_stats() const noexcept { return last_stats_; }
  const alignment_stats& current_stats() const noexcept { return stats_; }
  std::size_t channels() const noexcept { return channels_.size(); }

 private:
  enum class phase : std::uint8_t { idle, aligning, capturing, counting };
  struct channel_info {
    buffers::input_gate* gate = nullptr;
    std::uint32_t gate_index = 0;
    std::uint32_t channel = 0;
    bool received = false;   // delivered the pending checkpoint's barrier (or ended)
    bool capturing = false;  // its data is channel state of the pending checkpoint
  };

  void check_owner() const noexcept;
  std::size_t flat(std::uint32_t gate, std::uint32_t channel) const;
  std::string channel_name(std::size_t c) const;
  bool live(std::size_t c) const;
  bool all_received() const;

  void on_barrier(std::size_t c, checkpoint_id id, bool priority, std::size_t overtaken, barrier_actions& out);
  void on_marker(std::size_t c, checkpoint_id id, barrier_actions& out);
  void on_announcement(checkpoint_id id, barrier_actions& out);
  void on_channel_end(std::size_t c, bool failed, barrier_actions& out);
  void on_data(std::size_t c, buffers::gate_item& item, barrier_actions& out);

  void start(checkpoint_id id, barrier_actions& out);
  void start_capture(barrier_actions& out);           // trigger unaligned, mark capturing channels
  void capture_overtaken(std::size_t c, std::size_t overtaken, barrier_actions& out);
  void received(std::size_t c, bool priority, std::size_t overtaken, barrier_actions& out);
  void maybe_complete(barrier_actions& out);
  void check_deadline(barrier_actions& out);
  void end_pending(barrier_actions& out, abort_reason reason, std::string detail);  // abort it
  void reset_pending(checkpoint_id ended);

  std::vector<buffers::input_gate*> gates_;
  std::vector<std::size_t> gate_base_;  // flat index of each gate's channel 0
  std::vector<channel_info> channels_;
  handler_options options_;
  phase phase_ = phase::idle;
  checkpoint_id pending_ = no_checkpoint;
  checkpoint_id last_ended_ = no_checkpoint;
  handler_clock::time_point deadline_{};
  alignment_stats stats_;
  std::optional<alignment_stats> last_stats_;
  bool replaying_ = false;
};

}  // namespace sluice::snapshot
