#include <sluice/buffers/event_codec.hpp>
#include <sluice/dataflow/operators.hpp>
#include <sluice/dataflow/task_parts.hpp>

#include <fmt/core.h>

namespace sluice::dataflow {

namespace {

io::error closed_output() {
  return io::error(std::make_error_code(std::errc::operation_canceled),
                   "output partition closed (the task is stopping)");
}

}  // namespace

runtime::task<io::result<void>> partition_queue::drain() {
  while (!queue_.empty()) {
    pending_output& p = queue_.front();
    if (p.what == pending_output::kind::record) {
      const bool ok = co_await partition_->emit_bytes(p.bytes, p.subpartition);
      if (!ok) co_return closed_output();
    } else {
      buffers::gate_event event{p.what == pending_output::kind::watermark ? buffers::gate_event::type::watermark
                                                                          : buffers::gate_event::type::end_of_data,
                                p.time};
      std::optional<buffers::buffer_view> view = co_await buffers::request_event_buffer(&partition_->pool(), event);
      if (!view) co_return closed_output();
      partition_->add_event_to_all(std::move(*view));
    }
    queue_.pop_front();
  }
  co_return io::result<void>();
}

std::vector<std::byte> partition_queue::backlog_state() const {
  std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> records;
  for (const pending_output& p : queue_) {
    if (p.what == pending_output::kind::record) records.emplace_back(p.subpartition, p.bytes);
  }
  return detail::encode_state(records);
}

}  // namespace sluice::dataflow
