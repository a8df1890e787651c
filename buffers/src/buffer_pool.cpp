#include <sluice/buffers/buffer_pool.hpp>
#include <sluice/runtime/log.hpp>
#include <sluice/runtime/plant.hpp>

#include <fmt/core.h>

#include <stdexcept>

namespace sluice::buffers {

local_buffer_pool::local_buffer_pool(segment_pool& segments, std::size_t min_segments, std::size_t max_segments)
    : segments_(&segments), owner_(runtime::executor::current()), min_(min_segments), max_(max_segments) {
  if (min_segments == 0 || min_segments > max_segments) {
    throw std::invalid_argument(fmt::format(
        "local buffer pool: bounds min {} / max {} segments; need 1 <= min <= max", min_segments, max_segments));
  }
  if (max_segments > segments.total_segments()) {
    throw std::invalid_argument(fmt::format(
        "local buffer pool: max {} segments exceeds the executor's {} segments", max_segments,
        segments.total_segments()));
  }
  if (segments.free_segments() < min_segments) {
    throw std::runtime_error(fmt::format(
        "local buffer pool: needs {} segments but the executor's segment pool has only {} free; "
        "raise the network memory or lower the pool minimum",
        min_segments, segments.free_segments()));
  }
  slots_.resize(segments.total_segments());
  free_.reserve(max_segments);
  for (std::size_t i = 0; i < min_segments; ++i) {
    std::byte* segment = segments_->take();
    assert(segment != nullptr);
    const std::uint32_t slot = segments_->slot_of(segment);
    slots_[slot].state = slot_state::free;
    free_.push_back(slot);
    ++held_;
  }
}

local_buffer_pool::~local_buffer_pool() {
  check_owner();
  close();
  if (in_use_ > 0) {
    runtime::log::error("local buffer pool destroyed with {} buffers outstanding (leaked handles or views)",
                        in_use_);
    violation("local buffer pool destroyed with buffers outstanding");
  }
}

void local_buffer_pool::violation(const char* what) noexcept {
  ++violations_;
  // Aborts in every build: a buffer recycled twice or into the wrong pool corrupts what others read.
  if (assert_on_violation_) runtime::detail::assertion_failed(__FILE__, __LINE__, "no buffer pool violation", what);
}

std::optional<std::uint32_t> local_buffer_pool::take_slot() noexcept {
  if (!free_.empty()) {
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (held_ < max_) {
    if (std::byte* segment = segments_->take()) {
      ++held_;
      return segments_->slot_of(segment);
    }
  }
  return std::nullopt;
}

buffer local_buffer_pool::lend(std::uint32_t slot) noexcept {
  slot_info& s = slots_[slot];
  s.state = slot_state::in_use;
  s.refs = 1;
  ++in_use_;
  return buffer(this, segments_->segment_at(slot), slot, static_cast<std::uint32_t>(segments_->segment_bytes()));
}

std::optional<buffer> local_buffer_pool::try_request() {
  check_owner();
  // FIFO: a free segment while somebody waits would be a lost wake-up; never barge ahead of them.
  assert(waiters_.empty() || free_.empty());
  if (closed_ || !waiters_.empty()) return std::nullopt;
  const auto slot = take_slot();
  if (!slot) return std::nullopt;
  return lend(*slot);
}

void local_buffer_pool::close() noexcept {
  check_owner();
  closed_ = true;
  segments_->cancel_wait(*this);
  // Woken with an empty result: the waiters are scheduled and resume with nullopt.
  while (!waiters_.empty()) waiters_.front()->wake();
  while (!free_.empty()) {
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    give_back(slot);
  }
}

void local_buffer_pool::wait_for_segment() noexcept {
  // The segment pool is empty here (try_request found nothing), unless this pool is at its maximum.
  SLUICE_DEBUG_ASSERT(held_ >= max_ || segments_->free_segments() == 0, "a pool waits while segments are free");
  if (wants_segment()) segments_->wait_for_segment(*this);
}

bool local_buffer_pool::wants_segment() const noexcept { return !closed_ && !waiters_.empty() && held_ < max_; }

void local_buffer_pool::take_segment(std::byte* segment) noexcept {
  check_owner();
  SLUICE_ASSERT(wants_segment(), "a segment offered to a pool that cannot take it");
  const std::uint32_t slot = segments_->slot_of(segment);
  SLUICE_ASSERT(slots_[slot].state == slot_state::not_held, "a segment offered to a pool that holds it");
  ++held_;
  // Hand-off, as in recycle_slot: the first waiter gets it and is scheduled.
  auto* waiter = static_cast<request_awaiter*>(waiters_.front());
  waiter->result_.emplace(lend(slot));
  waiter->wake();
}

void local_buffer_pool::give_back(std::uint32_t slot) noexcept {
  SLUICE_ASSERT(held_ > 0, "more segments given back than the pool holds");
  slots_[slot].state = slot_state::not_held;
  --held_;
  segments_->give(segments_->segment_at(slot));
}

void local_buffer_pool::add_ref(std::uint32_t slot) noexcept {
  check_owner();
  SLUICE_ASSERT(slots_[slot].state == slot_state::in_use && slots_[slot].refs > 0, "retain of a recycled buffer");
  ++slots_[slot].refs;
}

void local_buffer_pool::drop_ref(std::uint32_t slot) noexcept {
  if (on_owner()) {
    drop_ref_on_owner(slot);
    return;
  }
  // Foreign executor or thread: send the release home (invariant 2). The count is not touched here.
  SLUICE_ASSERT(owner_ != nullptr, "a buffer of a pool without an executor was released on an executor");
  owner_->post([pool = this, slot] {
    ++pool->foreign_releases_;
    pool->drop_ref_on_owner(slot);
  });
}

void local_buffer_pool::drop_ref_on_owner(std::uint32_t slot) noexcept {
  check_owner();
  slot_info& s = slots_[slot];
  if (s.state != slot_state::in_use || s.refs == 0) {
    violation("a buffer reference was released twice");
    return;
  }
  if (--s.refs == 0) {
    s.unique_watcher = nullptr;
    recycle_slot(slot);
  } else if (s.refs == 1 && s.unique_watcher != nullptr) {
    std::exchange(s.unique_watcher, nullptr)->set();
    if (SLUICE_PLANTED("double-recycle")) recycle(segments_->segment_at(slot));  // FLINK-18050: the handle recycles it again
  }
}

void local_buffer_pool::watch_unique(const buffer& b, runtime::event& wake) noexcept {
  check_owner();
  assert(b.pool_ == this);
  slot_info& s = slots_[b.slot_];
  assert(s.unique_watcher == nullptr || s.unique_watcher == &wake);
  if (s.refs <= 1) {
    wake.set();
  } else {
    s.unique_watcher = &wake;
  }
}

void local_buffer_pool::unwatch(const buffer& b) noexcept {
  check_owner();
  assert(b.pool_ == this);
  slots_[b.slot_].unique_watcher = nullptr;
}

std::uint32_t local_buffer_pool::references(const buffer& b) const noexcept {
  check_owner();
  assert(b.pool_ == this);
  return slots_[b.slot_].refs;
}

bool buffer::shared() const noexcept { return pool_ != nullptr && pool_->references(*this) > 1; }

void local_buffer_pool::recycle(std::byte* segment) noexcept {
  check_owner();
  if (!segments_->owns(segment)) {
    violation("recycle of a segment from another executor's memory");
    return;
  }
  const std::uint32_t slot = segments_->slot_of(segment);
  switch (slots_[slot].state) {
    case slot_state::not_held:
      violation("recycle of a segment into a pool that did not lend it");
      return;
    case slot_state::free:
      violation("double recycle of a segment");
      return;
    case slot_state::in_use:
      slots_[slot].refs = 0;
      slots_[slot].unique_watcher = nullptr;
      recycle_slot(slot);
      return;
  }
}

void local_buffer_pool::recycle_slot(std::uint32_t slot) noexcept {
  // Exactly once: only a segment lent out and no longer referenced is recycled.
  SLUICE_ASSERT(slots_[slot].state == slot_state::in_use && slots_[slot].refs == 0,
                "recycle of a segment that is not lent out, or still referenced");
  SLUICE_ASSERT(in_use_ > 0, "more segments recycled than lent");
  ++recycled_;
  --in_use_;
  if (!closed_ && !waiters_.empty()) {
    // Hand-off: the first waiter gets this segment and is scheduled; nothing of it runs now.
    auto* waiter = static_cast<request_awaiter*>(waiters_.front());
    waiter->result_.emplace(lend(slot));
    if (SLUICE_PLANTED("inline-recycle")) return waiter->wake_inline();  // FLINK-22946: runs the waiter now
    waiter->wake();
    return;
  }
  slots_[slot].state = slot_state::free;
  if (closed_ || held_ > min_) {
    give_back(slot);
  } else {
    free_.push_back(slot);  // capacity max_ reserved: no allocation
  }
}

// --- buffer and buffer_view: the parts that need the pool --------------------------------------

void buffer::reset() noexcept {
  if (pool_ == nullptr) return;
  std::exchange(pool_, nullptr)->drop_ref(slot_);
  data_ = nullptr;
  size_bytes_ = capacity_bytes_ = 0;
}

buffer_view buffer::retain() const { return slice(0, size_bytes_); }

buffer_view buffer::slice(std::size_t offset_bytes, std::size_t length_bytes) const {
  assert(valid());
  assert(offset_bytes <= size_bytes_ && length_bytes <= size_bytes_ - offset_bytes && "slice out of range");
  pool_->add_ref(slot_);
  return buffer_view(pool_, data_ + offset_bytes, slot_, static_cast<std::uint32_t>(length_bytes), kind_);
}

void buffer_view::reset() noexcept {
  if (pool_ == nullptr) return;
  std::exchange(pool_, nullptr)->drop_ref(slot_);
  data_ = nullptr;
  size_bytes_ = 0;
}

buffer_view buffer_view::slice(std::size_t offset_bytes, std::size_t length_bytes) const {
  assert(valid());
  assert(offset_bytes <= size_bytes_ && length_bytes <= size_bytes_ - offset_bytes && "slice out of range");
  pool_->add_ref(slot_);
  return buffer_view(pool_, data_ + offset_bytes, slot_, static_cast<std::uint32_t>(length_bytes), kind_);
}

}  // namespace sluice::buffers
