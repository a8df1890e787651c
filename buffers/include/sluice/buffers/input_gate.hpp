#pragma once
// input_gate: the receiving end of N input channels on one executor, with Flink's credit-based
// flow control (exclusive + floating buffers).
//
// Protocol:
// - Construction takes `channels * exclusive_per_channel` EXCLUSIVE buffers from the local pool
//   (std::runtime_error if the pool cannot supply them). FLOATING buffers are drawn from the same
//   pool on demand, at most `floating` at a time for the whole gate, and go back to the pool when
//   the consumer releases them (once no view holds them: see view-held below).
// - Every free buffer a channel holds is one credit. New credit (initially the exclusive buffers,
//   later recycled exclusive buffers and assigned floating buffers) is collected by
//   `take_credit_announcements()`, which the transport / local channel forwards to the senders.
// - A sender sends only against announced credit: `request_buffer_for(ch)` consumes one announced
//   credit and lends the sender a gate_buffer to fill; `deliver(std::move(b), backlog)` queues it.
//   Requesting without announced credit, or delivering a buffer that was not requested from this
//   gate, throws std::logic_error. Each delivery reports the sender's backlog; if the backlog exceeds
//   the credit the channel holds, the channel queues (FIFO, once) for floating buffers.
// - Floating buffers are distributed ONE AT A TIME round-robin among the queued channels (a channel
//   still short goes to the back of the queue), when announcements are taken and whenever the
//   consumer releases a floating buffer (that buffer goes back to the pool, and from there to the
//   longest-waiting channel). So 4 channels with big backlogs share 8 floating buffers 2 each.
// - Events need no credit (`deliver_event`); a priority event overtakes the data queued on its
//   channel (after earlier priority events). End-of-partition ends a channel once consumed.
// - Events are bounded like data. An in-band watermark queued right behind another in-band
//   watermark merges into it (the later time wins: both say "event time t is complete"). Beyond
//   that, a channel holds at most `max_queued_events_per_channel` unconsumed events: one more fails
//   THAT channel (channel_failed, failure() names the flood) and deliver_event returns false, so the
//   channel's carrier cancels its sender. Data and events delivered to a failed channel later are
//   dropped (a data buffer goes back as free credit of the ended channel).
// - Consumer: `co_await next()` yields the next gate_item, round-robin across channels with queued
//   items, priority events first. It suspends while nothing is queued and is woken by SCHEDULING
//   (invariant 3). nullopt once `finished()` (every channel's end-of-partition consumed), when the
//   gate is destroyed, or when the waiting task is stopped. Dropping / release()-ing the item's
//   gate_buffer returns an exclusive segment to its channel (new credit) and a floating one to the
//   pool (a view-held one only when its view goes).
// - Checkpoint support. block(c) holds channel c's data and in-band events back from next() (aligned
//   alignment); priority events still pass. queued_data_views(c) returns views of the data buffers
//   queued on c (unaligned channel-state capture; no copy). A buffer released while a view of it is
//   alive (the channel-state writer still writing it) is VIEW-HELD, exclusive or floating: it stays
//   charged to its channel and is no credit until its last view goes; then an exclusive one turns
//   into new credit and a floating one goes back to the pool (and from there to the
//   longest-waiting channel). So a slow state write slows that channel down instead of growing
//   memory, and the gate never has more than `floating` floating segments, view-held ones included.
// - `co_await wait_credit()` returns once take_credit_announcements() has something to say; the
//   transport's credit pump waits on it.
// - fail_channel(c, why) ends channel c with a channel_failed event carrying no data (failure(c) says
//   why): a lost connection. release_channel(c) drops it for good: queued and free buffers go back to
//   the pool, buffers still out go to the pool when released, later deliveries are dropped.
// - Single executor, no locks or atomics (invariant 1). Memory is bounded by
//   channels * exclusive + floating segments (invariant 6). Every gate_buffer must be released
//   before the gate is destroyed (asserted).
//
// Credit accounting (check_credit_accounting(), scenario 19) -- for every channel c, at every step:
//
//   exclusive_per_channel + floating_assigned(c)
//       == announced_unused(c)   credits announced to the sender and not yet used
//        + unannounced(c)        free buffers whose credit is not announced yet
//        + sender_held(c)        requested by the sender, not yet delivered
//        + queued(c)             delivered data buffers not yet taken by the consumer
//        + consumer_held(c)      handed to the consumer, not yet released
//        + view_held(c)          released by the consumer, a view still alive (state writer);
//                                exclusive or floating: a floating one stays in
//                                floating_assigned(c) until its view goes
//
//   and announced_unused(c) + unannounced(c) == free buffers actually held by c,
//   and sum_c floating_assigned(c) == floating_in_use() <= floating,
//   and the gate's pool segments in use == segments_held() == sum over live channels c of
//   (exclusive_per_channel + floating_assigned(c)). A view-held buffer is a pool segment in use,
//   so it must be charged to its channel: a floating buffer that left floating_assigned(c) while a
//   view held it would balance both sides above and yet be charged to nobody, and the gate could
//   lend one more floating buffer than `floating`. The pool may serve others too and a released
//   channel's buffers go back as they come home, so check_credit_accounting() checks the pool
//   clause as pool in_use() >= segments_held(); it is exact for a pool of this gate alone.
//
//   Debug builds assert this at the exit of every public mutator; in every build, the counters
//   never go below zero and the ownership checks stay on (SLUICE_ASSERT).
//
//   input_gate gate(pool, {.channels = 4});
//   for (auto [ch, n] : gate.take_credit_announcements()) send_credit(ch, n);
//   while (auto item = co_await gate.next()) use(*item);

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/detail/wait_list.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::buffers {

class input_gate;

struct gate_options {
  std::size_t channels = 1;
  std::size_t exclusive_per_channel = 2;
  std::size_t floating = 8;
  // Unconsumed events a channel may hold (end-of-partition and channel_failed excepted); at least 1.
  std::size_t max_queued_events_per_channel = 256;
};

struct credit_announcement {
  std::uint32_t channel = 0;
  std::uint32_t credits = 0;
  friend bool operator==(const credit_announcement&, const credit_announcement&) = default;
};

struct gate_event {
  // cancellation_marker: an upstream task gave up checkpoint `id`. channel_failed: the channel was
  // lost (input_gate::failure() says why); it ends the channel like end_of_partition.
  // end_of_data: the upstream has emitted its last record (it still forwards barriers, for a final
  // checkpoint, before end_of_partition). watermark: event time `id` is complete upstream.
  // barrier_announcement: barrier `id` (aligned with a timeout) was queued in-band upstream; the
  // announcement travels with priority, so the consumer's alignment timeout counts from it, not
  // from when the barrier, queued behind data, is finally taken.
  enum class type : std::uint8_t {
    end_of_partition,
    barrier,
    cancellation_marker,
    channel_failed,
    custom,
    end_of_data,
    watermark,
    barrier_announcement,
  };
  type kind = type::custom;
  std::uint64_t id = 0;  // e.g. the checkpoint id of a barrier
};
// "end-of-partition", "barrier", "watermark", ...
std::string_view to_string(gate_event::type kind) noexcept;

// A gate segment lent to the sender (to fill) or to the consumer (to read). Move-only; dropping it
// (or release()) hands the segment back to the gate, on the gate's executor: dropped on another
// executor (a transport's), it goes home by a message to the gate's executor and never touches the
// gate there. So destroy a gate only after its executor has run the messages of such drops.
class gate_buffer {
 public:
  gate_buffer() noexcept = default;
  gate_buffer(gate_buffer&& other) noexcept { steal(other); }
  gate_buffer& operator=(gate_buffer&& other) noexcept {
    if (this != &other) {
      release();
      steal(other);
    }
    return *this;
  }
  gate_buffer(const gate_buffer&) = delete;
  gate_buffer& operator=(const gate_buffer&) = delete;
  ~gate_buffer() { release(); }

  bool valid() const noexcept { return gate_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  std::uint32_t channel() const noexcept { return channel_; }
  bool is_floating() const noexcept { return floating_; }
  std::span<const std::byte> data() const noexcept { return buf_.data(); }
  std::size_t size() const noexcept { return buf_.size(); }
  // The underlying segment, for the sender to write into.
  buffer& get() noexcept { return buf_; }

  inline void release() noexcept;

 private:
  friend class input_gate;
  enum class stage : std::uint8_t { sender, consumer };
  gate_buffer(input_gate* gate, std::uint32_t channel, bool floating, stage s, buffer b) noexcept
      : gate_(gate), channel_(channel), floating_(floating), stage_(s), buf_(std::move(b)) {}
  void steal(gate_buffer& other) noexcept {
    gate_ = std::exchange(other.gate_, nullptr);
    channel_ = other.channel_;
    floating_ = other.floating_;
    stage_ = other.stage_;
    buf_ = std::move(other.buf_);
  }

  input_gate* gate_ = nullptr;
  std::uint32_t channel_ = 0;
  bool floating_ = false;
  stage stage_ = stage::consumer;
  buffer buf_;
};

// What next() yields: a data buffer or an event, with its channel.
struct gate_item {
  std::uint32_t channel = 0;
  gate_buffer data;                  // valid for data
  std::optional<gate_event> event;   // set for events
  bool priority = false;             // a priority event
  // For a priority event: how many data buffers it overtook on its channel (queued ahead of it when
  // it was delivered; they are the first ones behind it now).
  std::size_t overtaken = 0;
  bool is_event() const noexcept { return event.has_value(); }
  bool is_end_of_partition() const noexcept {
    return event && event->kind == gate_event::type::end_of_partition;
  }
  bool is_failure() const noexcept { return event && event->kind == gate_event::type::channel_failed; }
};

class input_gate {
 public:
  // On the owner executor (the pool's). Throws std::invalid_argument for zero channels and
  // std::runtime_error if the pool cannot supply the exclusive buffers.
  input_gate(local_buffer_pool& pool, gate_options options);
  ~input_gate();
  input_gate(const input_gate&) = delete;
  input_gate& operator=(const input_gate&) = delete;

  // --- credit -------------------------------------------------------------------------------
  // Distributes floating buffers to channels waiting for them, turns view-held buffers whose views
  // are gone back into credit, then returns the credit each channel gained since the last call
  // (channels with none are left out), in channel order.
  std::vector<credit_announcement> take_credit_announcements();
  // True once there may be credit to announce; false if the waiter was stopped.
  runtime::task<bool> wait_credit();

  // --- sender side --------------------------------------------------------------------------
  // Uses one announced credit of `channel`; throws std::logic_error if it has none.
  gate_buffer request_buffer_for(std::uint32_t channel);
  // Queues a filled buffer from request_buffer_for(); `backlog` = buffers still waiting at the sender.
  void deliver(gate_buffer&& filled, std::size_t backlog);
  // request_buffer_for + copy + deliver. Throws std::length_error if `bytes` exceed a segment.
  void deliver(std::uint32_t channel, std::span<const std::byte> bytes, std::size_t backlog);
  // The sender's backlog, reported without a buffer (a remote backlog frame).
  void note_sender_backlog(std::uint32_t channel, std::size_t backlog);
  // Events need no credit. True when the event is queued (or merged into a queued watermark);
  // false when it was dropped: the channel is released or failed, or this event exceeded the
  // channel's event bound (the channel is failed now). Throws std::logic_error after the channel's
  // end-of-partition.
  bool deliver_event(std::uint32_t channel, gate_event event, bool priority = false);
  void deliver_end_of_partition(std::uint32_t channel) {
    deliver_event(channel, gate_event{gate_event::type::end_of_partition, 0});
  }

  // --- consumer -----------------------------------------------------------------------------
  std::optional<gate_item> try_next();

  class next_awaiter : public runtime::detail::list_wait {
   public:
    explicit next_awaiter(input_gate& gate) noexcept : gate_(&gate) {}
    bool await_ready() {
      result_ = gate_->try_next();
      return result_.has_value() || gate_->finished() || gate_->closed_;
    }
    template <class P>
    void await_suspend(std::coroutine_handle<P> h) {
      SLUICE_ASSERT(gate_->on_owner(), "co_await next() off the gate's executor");
      enqueue(gate_->waiters_, h, runtime::detail::stop_token_of(h));
    }
    // Never touches the gate.
    std::optional<gate_item> await_resume() noexcept { return std::move(result_); }

   private:
    friend class input_gate;
    input_gate* gate_;
    std::optional<gate_item> result_{};
  };
  next_awaiter next() noexcept { return next_awaiter{*this}; }

  bool finished() const noexcept { return ended_ == channels_.size(); }
  // A priority event is queued: try_next() yields it first, even past blocked channels. A task whose
  // output is full still takes these (an unaligned barrier must not wait for the backpressure).
  bool has_priority() const noexcept { return priority_pending_ > 0; }
  // True once has_priority() (at once if it already is); false if the waiter was stopped.
  runtime::task<bool> wait_priority();
  // True once try_next() has an item for the caller or the gate is finished; takes nothing, so it
  // can race other waits (when_any) without losing an item. False if the waiter was stopped.
  runtime::task<bool> wait_item();

  // --- checkpoints ----------------------------------------------------------------------------
  void block(std::uint32_t channel);
  void unblock(std::uint32_t channel);
  void unblock_all();
  bool blocked(std::uint32_t channel) const { return channels_.at(channel).blocked; }
  // Views of the first `max` data buffers queued on `channel`, oldest first (behind any priority
  // events). With gate_item::overtaken as `max`: exactly what a priority barrier overtook.
  std::vector<buffer_view> queued_data_views(std::uint32_t channel, std::size_t max = SIZE_MAX);
  // Barrier announcements (aligned with a timeout): the in-band barrier `id` queued on `channel`
  // becomes a priority event that overtakes the data queued ahead of it (gate_item::overtaken
  // counts it, as for a barrier the sender sent with priority). False if it is not queued here.
  bool promote_barrier(std::uint32_t channel, std::uint64_t id);

  // --- failure and release ----------------------------------------------------------------------
  // Ends `channel` with a channel_failed event (after what is queued). Idempotent; no-op once ended.
  void fail_channel(std::uint32_t channel, std::string why);
  const std::string& failure(std::uint32_t channel) const { return channels_.at(channel).failure; }
  // fail_channel() was called on it (or its event bound was exceeded).
  bool failed(std::uint32_t channel) const { return !channels_.at(channel).failure.empty(); }
  // Drops `channel` for good (see the top comment). Counts as ended. Idempotent.
  void release_channel(std::uint32_t channel);
  bool released(std::uint32_t channel) const { return channels_.at(channel).released; }
  bool channel_ended(std::uint32_t channel) const { return channels_.at(channel).ended; }

  // --- accounting ---------------------------------------------------------------------------
  // Empty if the identity in the header comment holds for every channel, else what is wrong.
  std::string check_credit_accounting() const;

  std::size_t channels() const noexcept { return channels_.size(); }
  std::size_t announced_unused(std::uint32_t channel) const { return channels_.at(channel).announced_unused; }
  std::size_t floating_assigned(std::uint32_t channel) const { return channels_.at(channel).floating_assigned; }
  std::size_t queued(std::uint32_t channel) const { return channels_.at(channel).queued; }
  std::size_t queued_events(std::uint32_t channel) const { return channels_.at(channel).queued_events; }
  std::size_t view_held(std::uint32_t channel) const { return channels_.at(channel).parked.size(); }
  std::size_t floating_in_use() const noexcept { return floating_total_; }
  // Pool segments the gate accounts for: the exclusive buffers of live channels plus floating ones.
  std::size_t segments_held() const noexcept {
    return (channels_.size() - released_count_) * options_.exclusive_per_channel + floating_total_;
  }
  std::size_t waiting_for_floating() const noexcept { return floating_waiting_.size(); }
  // gate_buffers dropped on another executor that came home by message.
  std::uint64_t foreign_returns() const noexcept { return foreign_returns_; }
  bool on_owner() const noexcept { return runtime::executor::current() == owner_; }

 private:
  friend class gate_buffer;
  struct entry {
    buffer buf;
    bool floating = false;
    bool priority = false;
    std::optional<gate_event> event;
    std::size_t overtaken = 0;  // a priority event: data buffers queued ahead of it at delivery
  };
  struct parked_buffer {
    buffer buf;
    bool floating = false;
  };
  struct channel_state {
    std::vector<buffer> free_exclusive;
    std::vector<buffer> free_floating;
    std::vector<parked_buffer> parked;  // view-held buffers, exclusive and floating
    std::deque<entry> queue;
    std::string failure;
    std::size_t priority_front = 0;  // priority events at the front of `queue`
    std::size_t announced_unused = 0;
    std::size_t unannounced = 0;
    std::size_t sender_held = 0;
    std::size_t queued = 0;  // data buffers in `queue`
    std::size_t queued_events = 0;  // events in `queue`, bounded by max_queued_events_per_channel
    std::size_t consumer_held = 0;
    std::size_t floating_assigned = 0;
    std::size_t backlog = 0;
    bool waiting_for_floating = false;
    bool in_ready = false;
    bool end_delivered = false;
    bool ended = false;
    bool blocked = false;
    bool released = false;
  };

  void check_owner() const noexcept { SLUICE_ASSERT(on_owner(), "input gate used off its owning executor"); }
  // Debug builds: the identity above holds at the exit of every public mutator (an
  // accounting_guard's destructor checks it); under NDEBUG both compile to nothing.
  struct accounting_guard;
  void assert_credit_accounting() const noexcept;
  channel_state& at(std::uint32_t channel);
  std::size_t deficit(const channel_state& c) const noexcept;
  void note_backlog(std::uint32_t channel, std::size_t backlog);
  void distribute_floating();
  void make_ready(std::uint32_t channel);
  void wake_consumers() noexcept;
  void give_back(gate_buffer& b) noexcept;
  // Off the owner: posts `b` (already detached) to the owner's inbox, where it is given back.
  void send_home(gate_buffer& b) noexcept;
  bool takeable(const channel_state& c) const noexcept;
  void reclaim_parked();
  // A floating buffer whose handle is its last reference goes back to the pool.
  void release_floating(channel_state& c, buffer& b) noexcept;
  void mark_ended(channel_state& c);

  local_buffer_pool* pool_;
  runtime::executor* owner_;
  gate_options options_;
  std::vector<channel_state> channels_;
  std::deque<std::uint32_t> ready_;             // channels with queued items, round-robin
  std::deque<std::uint32_t> floating_waiting_;  // channels short of credit, FIFO
  std::size_t priority_pending_ = 0;
  std::size_t floating_total_ = 0;
  std::size_t ended_ = 0;
  std::size_t parked_total_ = 0;
  std::size_t released_count_ = 0;
  std::uint64_t foreign_returns_ = 0;
  bool closed_ = false;
  runtime::event credit_;
  runtime::event priority_;
  runtime::event item_ready_;  // something was queued or unblocked (for wait_item)
  bool has_takeable() const noexcept;
  runtime::detail::wait_list waiters_;
};

inline void gate_buffer::release() noexcept {
  if (gate_ == nullptr) return;
  input_gate* g = std::exchange(gate_, nullptr);
  if (!g->on_owner()) {
    g->send_home(*this);  // a foreign executor never touches the gate (invariant 2)
    return;
  }
  g->give_back(*this);
}

}  // namespace sluice::buffers
