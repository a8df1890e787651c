#include <sluice/buffers/result_partition.hpp>
#include <sluice/runtime/timer.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace sluice::buffers {

namespace {
constexpr std::chrono::microseconds yield_interval{200};
runtime::task<void> wait_finished(runtime::event* e) { (void)co_await e->wait(); }
}  // namespace

bool is_end_of_partition(const buffer_view& event) noexcept {
  return event.valid() && event.kind() == buffer_kind::event && event.size() == 1 &&
         event.data()[0] == end_of_partition_tag;
}

result_partition::result_partition(local_buffer_pool& pool, partition_options options)
    : pool_(&pool),
      owner_(runtime::executor::current()),
      options_(options),
      serializer_(options.max_record_bytes) {
  if (owner_ == nullptr) {
    throw std::logic_error("result partition: construct it on the executor that owns it (none is running here)");
  }
  if (options_.subpartitions == 0) {
    throw std::invalid_argument("result partition: needs at least 1 subpartition, got 0");
  }
  if (options_.flush_timeout.count() < 0) {
    throw std::invalid_argument(fmt::format("result partition: flush timeout {} ms is negative",
                                            options_.flush_timeout.count()));
  }
  if (options_.forward_subpartition >= options_.subpartitions) {
    throw std::invalid_argument(fmt::format("result partition: forward subpartition {} is not below {} subpartitions",
                                            options_.forward_subpartition, options_.subpartitions));
  }
  SLUICE_ASSERT(pool.owner() == nullptr || pool.owner() == owner_, "result partition on another executor than its pool");
  subs_ = std::make_unique<subpartition_state[]>(options_.subpartitions);
  cursors_ = std::make_unique<write_cursor[]>(options_.subpartitions);
}

result_partition::~result_partition() {
  check_owner();
  assert(!emitting_ && "result partition destroyed during an emit");
  for (std::size_t i = 0; i < options_.subpartitions; ++i) {
    subs_[i].queue.clear();
    subs_[i].current.reset();
  }
  spare_.reset();
}

result_partition::subpartition_state& result_partition::at(std::size_t subpartition) const {
  if (subpartition >= options_.subpartitions) {
    throw std::out_of_range(fmt::format("result partition: subpartition {} out of range (it has {})", subpartition,
                                        options_.subpartitions));
  }
  return subs_[subpartition];
}

// --- producing -------------------------------------------------------------------------------------

void result_partition::begin_emit(std::size_t subpartition) {
  check_owner();
  assert(!emitting_ && "emit while the previous emit is still running (one producer, await each emit)");
  assert(!finished_ && "emit after finish()");
  (void)at(subpartition);
}

runtime::task<bool> result_partition::emit_bytes(std::span<const std::byte> record, std::size_t subpartition) {
  begin_emit(subpartition);
  serializer_.serialize_bytes(record);
  emitting_ = true;
  return emit_pending(subpartition);
}

runtime::task<bool> result_partition::emit_stream_bytes(std::span<const std::byte> bytes, std::size_t subpartition) {
  begin_emit(subpartition);
  if (bytes.empty()) co_return true;
  serializer_.load_stream_bytes(bytes);
  emitting_ = true;
  const bool written = co_await emit_pending(subpartition);
  co_return written;
}

runtime::task<bool> result_partition::emit_pending(std::size_t subpartition) {
  fast_budget_bytes_ = fast_path_bytes;
  const bool written = co_await copy_record(subpartition);
  emitting_ = false;
  // A producer that never waits for a buffer would starve the senders and the flusher of its
  // executor: give them a turn every yield_interval (copy_record read the clock last).
  if (last_now_ >= next_yield_) {
    next_yield_ = last_now_ + yield_interval;
    co_await runtime::yield_to_io();
  }
  co_return written;
}

runtime::task<bool> result_partition::emit_broadcast_pending() {
  for (std::size_t i = 0; i < options_.subpartitions; ++i) {
    serializer_.serialize_bytes(broadcast_scratch_);
    const bool written = co_await copy_record(i);
    if (!written) {
      emitting_ = false;
      co_return false;
    }
  }
  emitting_ = false;
  co_return true;
}

runtime::task<bool> result_partition::copy_record(std::size_t subpartition) {
  subpartition_state& s = subs_[subpartition];
  (void)settled(s);  // what try_emit wrote is committed and its cursor disarmed until arm() below
  // One clock read per slow-path record (again after waiting for a buffer): the deadline of a
  // buffer taken here and the due check below use it, and emit_pending's yield check after it.
  last_now_ = owner_->now();
  for (;;) {
    if (s.released) {
      serializer_.clear();
      ++dropped_records_;
      co_return true;
    }
    if (!s.current.valid() && spare_.valid()) {
      s.current = std::move(spare_);
      s.current.set_kind(buffer_kind::data);
      s.deadline = last_now_ + options_.flush_timeout;
    }
    if (!s.current.valid()) {
      std::optional<buffer> next = co_await pool_->request();  // backpressure: suspends on an empty pool
      if (!next.has_value()) {
        serializer_.clear();
        co_return false;
      }
      last_now_ = owner_->now();
      if (s.released) continue;  // released while we waited: `next` goes back to the pool
      s.current = std::move(*next);
      s.current.set_kind(buffer_kind::data);
      s.deadline = last_now_ + options_.flush_timeout;
    }
    // A record that fits in one buffer never spans two (fewer records reassembled by the consumer).
    if (!serializer_.started() && s.current.size() > 0 && serializer_.pending_bytes() > s.current.remaining() &&
        serializer_.pending_bytes() <= s.current.capacity()) {
      enqueue_current(s);
      continue;
    }
    const copy_result result = serializer_.copy_to(s.current);
    if (result == copy_result::record_complete) break;
    enqueue_current(s);  // full
    if (result == copy_result::record_complete_buffer_full) break;
  }
  if (s.current.valid() && (options_.flush_timeout.count() == 0 || last_now_ >= s.deadline)) {
    enqueue_current(s);
  }
  arm(s);
  co_return true;
}

buffer& result_partition::settled(subpartition_state& s) noexcept {
  write_cursor& c = cursor(s);
  if (c.pos != nullptr) {
    assert(s.current.valid());
    const std::byte* committed = s.current.writable().data();
    assert(c.pos >= committed && c.end == committed + s.current.remaining());
    s.current.commit(static_cast<std::size_t>(c.pos - committed));
    c = write_cursor{};
  }
  return s.current;
}

void result_partition::arm(subpartition_state& s) noexcept {
  buffer& b = settled(s);
  if (!b.valid() || s.released || options_.flush_timeout.count() == 0) return;
  const std::span<std::byte> tail = b.writable();
  cursor(s) = write_cursor{tail.data(), tail.data() + tail.size()};
}

bool result_partition::try_emit_arm(std::size_t subpartition, std::size_t total_bytes, std::size_t record_bytes) {
  if (fast_budget_bytes_ <= 0) return false;  // emit() renews it and may yield
  subpartition_state& s = subs_[subpartition];
  if (options_.flush_timeout.count() == 0 || s.released || record_bytes > options_.max_record_bytes) return false;
  if (!s.current.valid() && !take_buffer_now(s)) return false;
  arm(s);
  const write_cursor& c = cursors_[subpartition];
  return total_bytes < static_cast<std::size_t>(c.end - c.pos);  // else the slow path finishes the buffer
}

void result_partition::enqueue_current(subpartition_state& s) {
  (void)settled(s);
  assert(s.current.valid() && s.current.size() > 0);
  data_bytes_ += s.current.size();
  buffer_view view = s.current.retain();
  s.current.reset();  // the view keeps the segment until the consumer is done with it
  push(s, entry{std::move(view), false});
}

void result_partition::push(subpartition_state& s, entry e) {
  if (s.released) return;  // e's view recycles its buffer here, exactly once
  if (e.view.kind() == buffer_kind::data) {
    ++s.data_queued;
    // Every queued data buffer holds its own segment of the pool.
    assert(s.data_queued <= pool_->max_segments());
  } else {
    if (s.events_queued == options_.max_queued_events) {
      throw std::length_error(fmt::format("result partition: {} events already queued on a subpartition; "
                                          "the consumer does not poll (raise max_queued_events?)",
                                          s.events_queued));
    }
    ++s.events_queued;
  }
  s.queue.push_back(std::move(e));
  s.available.set();  // schedules waiters, never calls them
}

void result_partition::flush(std::size_t subpartition) {
  check_owner();
  subpartition_state& s = at(subpartition);
  if (settled(s).valid() && s.current.size() > 0) enqueue_current(s);  // (try_emit may leave an empty one)
}

void result_partition::flush_all() {
  for (std::size_t i = 0; i < options_.subpartitions; ++i) flush(i);
}

void result_partition::flush_due() {
  check_owner();
  const auto now = owner_->now();
  for (std::size_t i = 0; i < options_.subpartitions; ++i) {
    subpartition_state& s = subs_[i];
    // (valid() may be read without settling: only the size lags behind an armed cursor)
    if (s.current.valid() && now >= s.deadline && settled(s).size() > 0) enqueue_current(s);
  }
}

runtime::task<void> result_partition::run_flusher() {
  check_owner();
  if (options_.flush_timeout.count() == 0) co_return;
  // Like Flink's output flusher: one wake-up per flush timeout flushes every partly filled buffer,
  // so no record waits longer than the timeout, and 1000 subpartitions cost one timer, not 1000.
  // finish() wakes it at once (it flushes everything itself), so the flusher never holds the end
  // of a partition up by a timeout.
  while (!finished_) {
    const bool ended = co_await runtime::with_timeout(wait_finished(&finished_event_), options_.flush_timeout);
    if (ended || finished_) co_return;
    const std::stop_token stop = co_await runtime::current_stop_token();
    if (stop.stop_requested()) co_return;
    flush_all();
  }
}

// --- events ----------------------------------------------------------------------------------------

void result_partition::add_event(buffer_view event, std::size_t subpartition) {
  check_owner();
  assert(event.valid() && event.kind() == buffer_kind::event);
  flush(subpartition);  // the event follows every record emitted before it
  push(at(subpartition), entry{std::move(event), false});
}

void result_partition::add_event_to_all(buffer_view event) {
  check_owner();
  assert(event.valid() && event.kind() == buffer_kind::event);
  const std::size_t n = options_.subpartitions;
  for (std::size_t i = 0; i < n; ++i) {
    flush(i);
    push(subs_[i], entry{i + 1 < n ? event.share() : std::move(event), false});
  }
}

std::vector<buffer_view> result_partition::add_priority_event(buffer_view event, std::size_t subpartition) {
  check_owner();
  assert(event.valid() && event.kind() == buffer_kind::event);
  subpartition_state& s = at(subpartition);
  std::vector<buffer_view> overtaken;
  if (s.released) return overtaken;
  flush(subpartition);  // data emitted before the barrier is either sent before it or overtaken
  if (s.events_queued == options_.max_queued_events) {
    throw std::length_error(fmt::format("result partition: {} events already queued on subpartition {}",
                                        s.events_queued, subpartition));
  }
  // Behind earlier priority events, ahead of everything else.
  std::size_t head = 0;
  while (head < s.queue.size() && s.queue[head].priority) ++head;
  overtaken.reserve(s.data_queued);
  for (std::size_t i = head; i < s.queue.size(); ++i) {
    if (s.queue[i].view.kind() == buffer_kind::data) overtaken.push_back(s.queue[i].view.share());
  }
  s.queue.insert(s.queue.begin() + static_cast<std::ptrdiff_t>(head), entry{std::move(event), true});
  ++s.events_queued;
  s.available.set();
  if (s.priority_wake != nullptr) s.priority_wake->set();
  return overtaken;
}

namespace {
template <class Queue>
std::optional<std::size_t> find_in_band(const Queue& queue, const buffer_view& event) {
  const std::byte* bytes = event.data().data();
  for (std::size_t k = 0; k < queue.size(); ++k) {
    if (!queue[k].priority && queue[k].view.data().data() == bytes) return k;
  }
  return std::nullopt;
}
}  // namespace

bool result_partition::event_queued(const buffer_view& event, std::size_t subpartition) const {
  check_owner();
  return find_in_band(at(subpartition).queue, event).has_value();
}

std::optional<std::vector<buffer_view>> result_partition::promote_event(const buffer_view& event,
                                                                         std::size_t subpartition) {
  check_owner();
  subpartition_state& s = at(subpartition);
  const std::optional<std::size_t> k = find_in_band(s.queue, event);
  if (!k) return std::nullopt;
  std::size_t head = 0;
  while (head < s.queue.size() && s.queue[head].priority) ++head;
  std::vector<buffer_view> overtaken;
  for (std::size_t i = head; i < *k; ++i) {
    if (s.queue[i].view.kind() == buffer_kind::data) overtaken.push_back(s.queue[i].view.share());
  }
  entry promoted = std::move(s.queue[*k]);
  promoted.priority = true;
  s.queue.erase(s.queue.begin() + static_cast<std::ptrdiff_t>(*k));
  s.queue.insert(s.queue.begin() + static_cast<std::ptrdiff_t>(head), std::move(promoted));
  s.available.set();
  if (s.priority_wake != nullptr) s.priority_wake->set();
  return overtaken;
}

void result_partition::set_priority_wake(std::size_t subpartition, runtime::event* wake) {
  check_owner();
  at(subpartition).priority_wake = wake;
}

runtime::task<bool> result_partition::finish() {
  check_owner();
  assert(!finished_ && !emitting_ && "finish() twice, or during an emit");
  std::optional<buffer> eop = co_await pool_->request();
  if (!eop.has_value()) co_return false;
  eop->set_kind(buffer_kind::event);
  const std::byte tag = end_of_partition_tag;
  eop->append({&tag, 1});
  buffer_view view = eop->retain();
  eop.reset();
  finished_ = true;
  finished_event_.set();
  add_event_to_all(std::move(view));  // flushes every subpartition first
  co_return true;
}

// --- consuming -------------------------------------------------------------------------------------

std::optional<result_partition::polled> result_partition::poll_next(std::size_t subpartition) {
  check_owner();
  subpartition_state& s = at(subpartition);
  if (s.queue.empty()) return std::nullopt;
  entry e = std::move(s.queue.front());
  s.queue.pop_front();
  if (e.view.kind() == buffer_kind::data) {
    --s.data_queued;
  } else {
    --s.events_queued;
  }
  if (s.queue.empty() && !s.released) s.available.reset();
  return polled{std::move(e.view), e.priority, s.data_queued, !s.queue.empty()};
}

std::size_t result_partition::backlog(std::size_t subpartition) const {
  check_owner();
  return at(subpartition).data_queued;
}

bool result_partition::take_buffer_now(subpartition_state& s) {
  if (spare_.valid()) {
    s.current = std::move(spare_);
  } else {
    std::optional<buffer> b = pool_->try_request();
    if (!b) return false;
    s.current = std::move(*b);
  }
  s.current.set_kind(buffer_kind::data);
  s.deadline = owner_->now() + options_.flush_timeout;
  return true;
}

runtime::task<bool> result_partition::wait_writable() {
  check_owner();
  if (writable()) co_return true;
  std::optional<buffer> b = co_await pool_->request();
  if (!b) co_return false;
  if (spare_.valid()) co_return true;  // (another waiter filled it first; `b` goes back)
  spare_ = std::move(*b);
  co_return true;
}

bool result_partition::next_is_data(std::size_t subpartition) const {
  check_owner();
  const subpartition_state& s = at(subpartition);
  return !s.queue.empty() && s.queue.front().view.kind() == buffer_kind::data;
}

std::size_t result_partition::queued(std::size_t subpartition) const {
  check_owner();
  return at(subpartition).queue.size();
}

runtime::event::awaiter result_partition::wait_available(std::size_t subpartition) {
  check_owner();
  return at(subpartition).available.wait();
}

void result_partition::release(std::size_t subpartition) {
  check_owner();
  subpartition_state& s = at(subpartition);
  if (s.released) return;
  s.released = true;
  std::deque<entry> dropped = std::move(s.queue);
  s.queue.clear();
  s.data_queued = 0;
  s.events_queued = 0;
  settled(s).reset();
  dropped.clear();      // each view recycles its buffer once; waiters are scheduled, not called
  s.available.set();    // a waiting consumer sees the release
}

bool result_partition::released(std::size_t subpartition) const {
  check_owner();
  return at(subpartition).released;
}

}  // namespace sluice::buffers
