// stream_task (stream_task.hpp): its restore from a checkpoint, before its loop runs: operator
// states, the source's position and the sink's staged output, then the output backlog resent and
// the recovered input channel state replayed.

#include "stream_task.hpp"

#include <sluice/buffers/event_codec.hpp>
#include <sluice/runtime/log.hpp>

#include <fmt/core.h>

#include <cstring>

namespace sluice::dataflow::detail {

namespace rt = sluice::runtime;
namespace bf = sluice::buffers;
namespace ss = sluice::snapshot;

namespace {

// Recovered input channel state is a byte stream: whole records, then at most the start of one
// whose rest follows on the live channel. Calls f for each whole record and returns that start.
template <class F>
std::span<const std::byte> for_each_whole_record(std::span<const std::byte> bytes, F&& f) {
  std::size_t at = 0;
  while (at + bf::record_length_bytes <= bytes.size()) {
    std::uint32_t n;
    std::memcpy(&n, bytes.data() + at, sizeof n);
    n = bf::detail::to_little(n);
    if (bytes.size() - at - bf::record_length_bytes < n) break;
    f(bytes.subspan(at + bf::record_length_bytes, n));
    at += bf::record_length_bytes + n;
  }
  return bytes.subspan(at);
}

}  // namespace

std::optional<std::string> stream_task::restore_operators() {
  const ss::task_state* state = wiring_.recovered;
  if (state == nullptr) return std::nullopt;
  try {
    const auto& ops = state->operator_state;
    for (const auto& [index, bytes] : ops) {
      const bool known = index < built_.states_.size() || (index == source_index && built_.source_ != nullptr) ||
                         (index == sink_index && built_.output_->is_sink()) ||
                         (index == backlog_index && dynamic_cast<backlog_source*>(built_.output_) != nullptr);
      if (!known) return fmt::format("task {}: the checkpoint holds state section {} that this task does not have", wiring_.name, index);
    }
    for (std::uint32_t i = 0; i < built_.states_.size(); ++i) {
      auto it = ops.find(i);
      if (it == ops.end()) continue;
      // An incremental snapshot's chain, oldest first: its whole state, then each delta on it.
      if (auto chain = state->operator_chain.find(i); chain != state->operator_chain.end()) {
        for (const auto& link : chain->second) built_.states_[i]->restore_state(link);
      }
      built_.states_[i]->restore_state(it->second);
    }
    if (built_.source_ != nullptr) {
      if (auto it = ops.find(source_index); it != ops.end()) built_.source_->restore_state(it->second);
    }
    if (auto it = ops.find(backlog_index); it != ops.end()) {
      dynamic_cast<backlog_source*>(built_.output_)->restore_backlog(it->second);
    }
    if (wiring_.partition == nullptr && !state->output_channels.empty()) {
      return fmt::format("task {}: the checkpoint holds output channel state, but this task has no output channels", wiring_.name);
    }
    for (const auto& [key, bytes] : state->output_channels) {
      if (key.group != 0 || key.index >= wiring_.partition->subpartitions()) {
        return fmt::format("task {}: the checkpoint holds output channel state for subpartition {}, of {}", wiring_.name, key.index,
                           wiring_.partition->subpartitions());
      }
    }
    for (const auto& [key, bytes] : state->input_channels) {
      if (key.group != 0 || key.index >= deserializers_.size()) {
        return fmt::format("task {}: the checkpoint holds input channel state for channel {}, of {}", wiring_.name, key.index,
                           deserializers_.size());
      }
    }
  } catch (const std::exception& e) {
    return fmt::format("task {}: restore state: {}", wiring_.name, e.what());
  }
  return std::nullopt;
}

rt::task<io::result<void>> stream_task::restore() {
  io::result<void> recovered = io::result<void>();
  const ss::task_state* state = wiring_.recovered;
  std::vector<std::byte> sink_state;
  if (state != nullptr) {
    if (auto it = state->operator_state.find(sink_index); it != state->operator_state.end()) sink_state = it->second;
  }
  if (built_.output_->is_sink()) {
    recovered = co_await built_.output_->recover(sink_state);
    if (!recovered) co_return recovered;
  }
  if (built_.source_ != nullptr) {
    recovered = co_await built_.source_->open();
    if (!recovered) co_return recovered;
  }
  if (state == nullptr) co_return recovered;
  recovered = co_await resend_output(*state);
  if (!recovered) co_return recovered;
  co_return co_await replay_input(*state);
}

// Output first: what the barrier overtook, as the raw bytes of each channel's stream (it may start
// inside a record whose first part the consumer holds), then the backlog (restored with the
// operators; the loop drains output before it takes input).
rt::task<io::result<void>> stream_task::resend_output(const ss::task_state& state) {
  for (const auto& [key, bytes] : state.output_channels) {
    const bool ok = co_await wiring_.partition->emit_stream_bytes(bytes, key.index);
    if (!ok) co_return failure("could not re-send recovered output");
  }
  co_return io::result<void>();
}

// Then recovered input, before any new input (invariant 8); a barrier meanwhile is "not ready". A
// channel's state may end inside a record: its start goes back into the channel's deserializer and
// the first live buffers of the channel complete it.
rt::task<io::result<void>> stream_task::replay_input(const ss::task_state& state) {
  if (built_.input_ == nullptr || state.input_channels.empty()) co_return io::result<void>();
  (void)handler_->set_replaying(true);
  for (const auto& [key, bytes] : state.input_channels) {
    const std::uint32_t channel = key.index;
    const std::vector<std::byte>* state_bytes = &bytes;
    std::span<const std::byte> partial;
    std::span<const std::byte>* partial_out = &partial;
    auto replayed = in_chain([this, channel, state_bytes, partial_out] {
      *partial_out = for_each_whole_record(*state_bytes, [&](std::span<const std::byte> r) {
        built_.input_->record(channel, r);
        ++records_in_;
      });
    });
    co_await std::move(replayed);
    deserializers_[channel].restore_partial(partial);
    if (built_.output_->backlogged()) {
      io::result<void> drained = co_await built_.output_->drain();
      if (!drained) co_return drained;
    }
  }
  (void)handler_->set_replaying(false);
  runtime::log::info("task {}: replayed recovered input channel state", wiring_.name);
  co_return io::result<void>();
}

}  // namespace sluice::dataflow::detail
