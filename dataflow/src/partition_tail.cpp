#include <sluice/buffers/event_codec.hpp>
#include <sluice/dataflow/operators.hpp>
#include <sluice/dataflow/task_parts.hpp>

#include <fmt/core.h>

#include <stdexcept>

namespace sluice::dataflow {

namespace {

io::error closed_output() {
  return io::error(std::make_error_code(std::errc::operation_canceled),
                   "output partition closed (the task is stopping)");
}

}  // namespace

bool partition_queue::ready() const noexcept {
  if (queue_.empty()) return true;
  // A record needs a data buffer (or fits the current one: writable() is the safe side); a
  // watermark or end of data needs a buffer of the pool, which it found missing last time.
  if (queue_.front().what == pending_output::kind::record) return partition_->writable();
  return event_spare_.has_value() || !event_blocked_;
}

runtime::task<void> partition_queue::wait_ready() {
  if (ready()) co_return;
  if (queue_.front().what == pending_output::kind::record) {
    (void)co_await partition_->wait_writable();
  } else {
    event_spare_ = co_await partition_->pool().request();  // kept for the event
    if (event_spare_) event_blocked_ = false;
  }
}

runtime::task<io::result<void>> partition_queue::drain_while(bool only_ready) {
  while (!queue_.empty()) {
    if (only_ready && !ready()) break;
    pending_output& p = queue_.front();
    if (p.what == pending_output::kind::record) {
      const bool ok = co_await partition_->emit_bytes(p.bytes, p.subpartition);
      if (!ok) co_return closed_output();
    } else {
      buffers::gate_event event{p.what == pending_output::kind::watermark ? buffers::gate_event::type::watermark
                                                                          : buffers::gate_event::type::end_of_data,
                                p.time};
      std::optional<buffers::buffer_view> view;
      if (event_spare_) {
        view = buffers::fill_event_buffer(*event_spare_, event);
        event_spare_.reset();
      } else if (only_ready) {
        view = buffers::make_event_buffer(partition_->pool(), event);
        if (!view) {
          event_blocked_ = true;
          break;
        }
      } else {
        view = co_await buffers::request_event_buffer(&partition_->pool(), event);
        if (!view) co_return closed_output();
      }
      partition_->add_event_to_all(std::move(*view));
    }
    queue_.pop_front();
  }
  co_return io::result<void>();
}

// The encoding of detail::encode_state(std::vector<std::pair<std::uint64_t, std::vector<std::byte>>>)
// (what restore_backlog decodes), written straight from the queue into one reservation: a copy of
// every record first, then growth record by record, made a backlog of a few hundred KiB cost a
// large part of a millisecond in the snapshot.
std::vector<std::byte> partition_queue::backlog_state() const {
  std::size_t count = 0;
  std::size_t bytes = 1 + 4;  // version, count
  for (const pending_output& p : queue_) {
    if (p.what != pending_output::kind::record) continue;
    ++count;
    bytes += 8 + 4 + p.bytes.size();
  }
  std::vector<std::byte> out;
  out.reserve(bytes);
  out.push_back(std::byte{1});
  buffers::encode_to(out, static_cast<std::uint32_t>(count));
  for (const pending_output& p : queue_) {
    if (p.what != pending_output::kind::record) continue;
    buffers::encode_to(out, static_cast<std::uint64_t>(p.subpartition));
    buffers::encode_to(out, p.bytes);
  }
  return out;
}

void partition_queue::restore_backlog(std::span<const std::byte> bytes) {
  auto records = detail::decode_state<std::vector<std::pair<std::uint64_t, std::vector<std::byte>>>>(bytes, "output backlog");
  for (auto& [sub, r] : records) {
    if (sub >= partition_->subpartitions()) throw std::runtime_error("restore output backlog: subpartition out of range");
    queue_.push_back(pending_output{pending_output::kind::record, static_cast<std::size_t>(sub), std::move(r), 0});
  }
}

}  // namespace sluice::dataflow
