#pragma once
// result_partition: the output of one task, with one subpartition (a FIFO of buffers and events) per
// consumer channel. It belongs to one executor, with its local_buffer_pool (invariant 1).
//
// Protocol:
// - Producing. `co_await emit(record, i)` (or a routing helper: forward, hashed, round-robin,
//   broadcast) serializes the record and copies it into subpartition i's current buffer. A full
//   buffer is finished: queued on the subpartition, visible to the consumer. The next buffer comes
//   from `co_await pool.request()`, so an exhausted pool suspends the producer (backpressure); the
//   pool's maximum bounds the memory (invariant 6). One producer: emits do not overlap (asserted).
//   A record that fits in one buffer never spans two (the buffer is finished early instead); records
//   larger than a buffer span several, so a buffer may start or end inside a record (and recovered
//   output, emit_stream_bytes, may start inside one): channel state is a byte stream, not records.
// - Flushing. A partially filled buffer is queued when its flush deadline passes (flush_timeout
//   after the first record entered it, on the executor clock), on flush()/flush_all(), or at once
//   when flush_timeout is 0. emit() enforces the deadline of its own subpartition; `run_flusher()`,
//   a coroutine the owner runs next to the producer, flushes every subpartition once per
//   flush_timeout (as Flink's output flusher does), so no record waits longer; it ends after finish().
// - Events go in-band, after everything emitted before them (the current buffer is flushed first).
//   finish() appends end-of-partition to every subpartition. A priority event (a barrier) overtakes
//   the queued data of its subpartition: it goes to the head of the queue (behind earlier priority
//   events), and views of exactly the overtaken data buffers come back, in order, as output channel
//   state; the buffers stay queued and are sent after the event.
// - Consuming (same executor). poll_next(i) yields the next buffer or event and the backlog;
//   `co_await wait_available(i)` waits until something is queued, woken by scheduling (invariant 3);
//   release(i) drops subpartition i: its queue is recycled once, and later records for it are dropped.
//
//   result_partition out(pool, {.subpartitions = 4, .flush_timeout = 100ms});
//   co_await when_all(out.run_flusher(), produce(out));   // produce: co_await out.emit(r, i); ...
//   while (auto next = out.poll_next(i)) send(std::move(next->view));

#include <sluice/buffers/buffer.hpp>
#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/buffers/codec.hpp>
#include <sluice/buffers/record_serializer.hpp>
#include <sluice/runtime/assert.hpp>
#include <sluice/runtime/event.hpp>
#include <sluice/runtime/executor.hpp>
#include <sluice/runtime/task.hpp>

#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace sluice::buffers {

struct partition_options {
  std::size_t subpartitions = 1;
  // How long a partially filled buffer may wait for more records; 0 flushes after every record.
  std::chrono::milliseconds flush_timeout{100};
  // The subpartition of emit_forward().
  std::size_t forward_subpartition = 0;
  // Events queued (not yet polled) per subpartition; data is bounded by the pool.
  std::size_t max_queued_events = 64;
  std::size_t max_record_bytes = default_max_record_bytes;
};

// The payload of the end-of-partition event that finish() appends.
inline constexpr std::byte end_of_partition_tag{0xE0};
bool is_end_of_partition(const buffer_view& event) noexcept;

class result_partition {
 public:
  // On the owner executor, which must be the pool's. Throws std::invalid_argument for bad options.
  result_partition(local_buffer_pool& pool, partition_options options);
  ~result_partition();
  result_partition(const result_partition&) = delete;
  result_partition& operator=(const result_partition&) = delete;

  // --- producing ---------------------------------------------------------------------------------
  // The fast path of emit(): writes `record` into the subpartition's current buffer when it fits
  // there whole and nothing else is due, without a coroutine. False: nothing was written; use
  // `co_await emit()`, which also enforces flush deadlines and lets the other tasks of the executor
  // (senders, the flusher) run now and then. A producer loop reads:
  //   if (!out.try_emit(r, i) && !co_await out.emit(r, i)) stop();   (hoist the co_await on GCC 12)
  template <codable T>
  bool try_emit(const T& record, std::size_t subpartition) {
    assert(!emitting_ && !finished_ && "try_emit during an emit or after finish()");
    if (subpartition >= options_.subpartitions) return false;
    const std::size_t record_bytes = codec<T>::encoded_size(record);
    const std::size_t total_bytes = record_length_bytes + record_bytes;
    write_cursor& c = cursors_[subpartition];
    // The per-record path: a bounds check against the subpartition's armed cursor and a pointer
    // bump (a disarmed cursor has pos == end). Everything else (no buffer yet, a record that does
    // not fit whole, the budget spent) goes to try_emit_arm() or to emit(). `<` as the slow path
    // does: a record that would fill the buffer exactly goes there, which finishes the buffer.
    if (total_bytes < static_cast<std::size_t>(c.end - c.pos) && record_bytes <= options_.max_record_bytes &&
        (fast_budget_bytes_ -= static_cast<std::ptrdiff_t>(total_bytes)) > 0) [[likely]] {
      write_record_at(c.pos, record, record_bytes);
      c.pos += total_bytes;
      return true;
    }
    if (!try_emit_arm(subpartition, total_bytes, record_bytes)) return false;
    write_record_at(c.pos, record, record_bytes);
    c.pos += total_bytes;
    return true;
  }

  // Each yields true once the record is written, false if the pool was closed or the producer stopped
  // while waiting for a buffer (the record is then dropped). The record is serialized at the call,
  // so the caller may reuse it at once; await the task before the next emit.
  template <codable T>
  runtime::task<bool> emit(const T& record, std::size_t subpartition) {
    begin_emit(subpartition);
    serializer_.serialize(record);
    emitting_ = true;
    return emit_pending(subpartition);
  }
  runtime::task<bool> emit_bytes(std::span<const std::byte> record, std::size_t subpartition);
  // Recovery: bytes of the stream itself (recovered output channel state: length prefixes and all,
  // possibly starting inside a record whose first part the consumer already holds), copied into
  // the subpartition as they are, before anything new is emitted there.
  runtime::task<bool> emit_stream_bytes(std::span<const std::byte> bytes, std::size_t subpartition);
  template <codable T>
  runtime::task<bool> emit_forward(const T& record) {
    return emit(record, options_.forward_subpartition);
  }
  // The same key always goes to the same subpartition: hasher(key) mod subpartitions.
  template <codable T, class K, class Hash = std::hash<K>>
  runtime::task<bool> emit_hashed(const T& record, const K& key, Hash hasher = {}) {
    return emit(record, static_cast<std::size_t>(hasher(key)) % options_.subpartitions);
  }
  template <codable T>
  runtime::task<bool> emit_round_robin(const T& record) {
    const std::size_t target = next_round_robin_;
    next_round_robin_ = (next_round_robin_ + 1) % options_.subpartitions;
    return emit(record, target);
  }
  // Every subpartition gets the record: encoded once, then copied into each.
  template <codable T>
  runtime::task<bool> emit_broadcast(const T& record) {
    begin_emit(0);
    broadcast_scratch_.clear();
    encode_to(broadcast_scratch_, record);
    emitting_ = true;
    return emit_broadcast_pending();
  }

  // Output availability, checked by a task before it takes more input: true when the next record
  // that needs a new buffer gets one at once. wait_writable() waits for a buffer and keeps it for
  // that record (false if stopped or the pool closed).
  bool writable() const noexcept { return spare_.valid() || pool_->available() > 0; }
  runtime::task<bool> wait_writable();

  // Queues the partially filled buffer of one / every subpartition (no-op when there is none).
  void flush(std::size_t subpartition);
  void flush_all();
  // Flushes every subpartition whose deadline has passed on the executor clock.
  void flush_due();
  // Flushes everything once per flush_timeout until finish() (or a stop request); with flush_timeout
  // 0 it returns at once.
  runtime::task<void> run_flusher();

  // `event` is a view of an event buffer (kind event). Queued after the data emitted so far.
  void add_event(buffer_view event, std::size_t subpartition);
  void add_event_to_all(buffer_view event);
  // Puts `event` ahead of the queued data of `subpartition` and returns views of the overtaken data
  // buffers, oldest first (the partially filled buffer is flushed first, so it is among them).
  std::vector<buffer_view> add_priority_event(buffer_view event, std::size_t subpartition);
  // Whether the event whose buffer `event` views is still queued (not yet sent) on `subpartition`.
  bool event_queued(const buffer_view& event, std::size_t subpartition) const;
  // Makes that queued in-band event a priority one: it moves ahead of the data queued before it
  // (behind earlier priority events) and the views of the data buffers it overtook come back,
  // oldest first, as add_priority_event's do. nullopt when it is not queued there any more. This is
  // how an aligned-with-timeout barrier stuck behind backpressure switches to unaligned.
  std::optional<std::vector<buffer_view>> promote_event(const buffer_view& event, std::size_t subpartition);
  // `wake` is set whenever a priority event is queued on `subpartition` (nullptr: none). A sender
  // waiting for credit for the data at the head uses it: a priority event needs no credit.
  void set_priority_wake(std::size_t subpartition, runtime::event* wake);
  // Flushes everything and appends end-of-partition to every subpartition (its buffer comes from the
  // pool, so this may wait). False if the pool closed or the caller was stopped. Once only.
  runtime::task<bool> finish();
  bool finished() const noexcept { return finished_; }

  // --- consuming ---------------------------------------------------------------------------------
  struct polled {
    buffer_view view;          // a data buffer or an event (view.kind())
    bool priority = false;     // a priority event that overtook queued data
    std::size_t backlog = 0;   // data buffers still queued after this one
    bool more_available = false;  // anything (data or event) still queued
  };
  std::optional<polled> poll_next(std::size_t subpartition);
  // Finished data buffers queued (the partially filled one does not count).
  std::size_t backlog(std::size_t subpartition) const;
  // Buffers and events queued.
  std::size_t queued(std::size_t subpartition) const;
  // True if the next poll_next() would yield a data buffer (which a sender may send only against
  // credit); false for an event or an empty queue.
  bool next_is_data(std::size_t subpartition) const;
  // True once something is queued (or the subpartition was released); false if the waiter was stopped.
  runtime::event::awaiter wait_available(std::size_t subpartition);
  // The consumer went away: recycles everything queued there; later records for it are dropped.
  // Idempotent.
  void release(std::size_t subpartition);
  bool released(std::size_t subpartition) const;

  std::size_t subpartitions() const noexcept { return options_.subpartitions; }
  const partition_options& options() const noexcept { return options_; }
  local_buffer_pool& pool() const noexcept { return *pool_; }
  // Where priority events (unaligned barriers, cancellation markers; a task also takes its in-band
  // barriers here) get their buffer: a pool of their own, so that one never waits for a data buffer
  // of a backpressured partition. Without one set, pool().
  void set_priority_event_pool(local_buffer_pool& pool) noexcept { priority_pool_ = &pool; }
  local_buffer_pool& priority_event_pool() const noexcept { return priority_pool_ ? *priority_pool_ : *pool_; }
  // Records dropped because their subpartition had been released.
  std::uint64_t dropped_records() const noexcept { return dropped_records_; }
  // Bytes of the data buffers handed to subpartitions so far (records and channel state; metrics).
  std::uint64_t data_bytes() const noexcept { return data_bytes_; }

 private:
  struct entry {
    buffer_view view;
    bool priority = false;
  };
  struct subpartition_state {
    std::deque<entry> queue;
    std::size_t data_queued = 0;
    std::size_t events_queued = 0;
    // Partially filled, not yet visible. While the subpartition's write cursor is armed, try_emit
    // has written bytes past current's size: read or change it only through settled(), never
    // directly (settled() commits those bytes and disarms the cursor).
    buffer current;
    std::chrono::steady_clock::time_point deadline{};
    bool released = false;
    runtime::event available;
    runtime::event* priority_wake = nullptr;
  };

  void check_owner() const noexcept {
    SLUICE_ASSERT(runtime::executor::current() == owner_, "result partition used off its owning executor");
  }
  subpartition_state& at(std::size_t subpartition) const;
  void begin_emit(std::size_t subpartition);
  runtime::task<bool> emit_pending(std::size_t subpartition);
  runtime::task<bool> emit_broadcast_pending();
  // Copies the serializer's pending record into the subpartition, finishing full buffers.
  runtime::task<bool> copy_record(std::size_t subpartition);
  void enqueue_current(subpartition_state& s);
  // try_emit(): a buffer for `s` without waiting (the spare, else the pool), or false.
  bool take_buffer_now(subpartition_state& s);

  // try_emit()'s write position in a subpartition's current buffer, in a dense array apart from
  // subpartition_state so that the per-record path touches 16 bytes. ARMED (pos < end) only between
  // arm() and the next settled(): then the bytes from the buffer's size up to `pos` are written but
  // not committed. Protocol: every access to a subpartition's current buffer other than try_emit's
  // goes through settled(), which commits those bytes AND DISARMS the cursor (pos = end = nullptr),
  // so no cached position survives a flush, a slow-path write, a release or a buffer change; only
  // arm() (after the slow path, or when try_emit takes a buffer) points it at a buffer again. A
  // missing arm() costs speed (try_emit declines), never bytes.
  struct write_cursor {
    std::byte* pos = nullptr;
    std::byte* end = nullptr;
  };
  template <codable T>
  static void write_record_at(std::byte* at, const T& record, std::size_t record_bytes) {
    const std::uint32_t length = detail::to_little(static_cast<std::uint32_t>(record_bytes));
    std::memcpy(at, &length, sizeof length);
    byte_writer w(std::span<std::byte>(at + record_length_bytes, record_bytes));
    codec<T>::encode(w, record);
  }
  // try_emit() off its per-record path: arms the cursor (taking a buffer when the subpartition has
  // none) and says whether a record of `total_bytes` may now go there through it.
  bool try_emit_arm(std::size_t subpartition, std::size_t total_bytes, std::size_t record_bytes);
  write_cursor& cursor(const subpartition_state& s) const noexcept {
    return cursors_[static_cast<std::size_t>(&s - subs_.get())];
  }
  // The current buffer with everything try_emit wrote committed; the cursor is disarmed.
  buffer& settled(subpartition_state& s) noexcept;
  // Points the cursor at the free tail of the current buffer (no-op without one, after a release,
  // or with flush_timeout 0, where every record is flushed at once).
  void arm(subpartition_state& s) noexcept;
  void push(subpartition_state& s, entry e);

  local_buffer_pool* pool_;
  local_buffer_pool* priority_pool_ = nullptr;
  runtime::executor* owner_;
  partition_options options_;
  std::unique_ptr<subpartition_state[]> subs_;
  record_serializer serializer_;
  buffer spare_;  // taken by wait_writable(), used by the next record that needs a buffer
  std::vector<std::byte> broadcast_scratch_;
  std::size_t next_round_robin_ = 0;
  bool emitting_ = false;
  bool finished_ = false;
  runtime::event finished_event_;  // wakes run_flusher() at finish()
  std::unique_ptr<write_cursor[]> cursors_;
  // try_emit() declines once it wrote fast_path_bytes since the last emit(), so the slow path
  // checks its deadline and the producer yields to the executor now and then.
  static constexpr std::ptrdiff_t fast_path_bytes = 32 * 1024;
  std::ptrdiff_t fast_budget_bytes_ = fast_path_bytes;
  std::chrono::steady_clock::time_point next_yield_{};
  std::chrono::steady_clock::time_point last_now_{};  // the executor clock, as copy_record read it last
  std::uint64_t dropped_records_ = 0;
  std::uint64_t data_bytes_ = 0;
};

}  // namespace sluice::buffers
