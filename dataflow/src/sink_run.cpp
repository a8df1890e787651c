// A sink's run and the framing of its checkpointed bytes (connector_parts.hpp, sink_recovery); and the
// wait connector_sink_tail::close() makes, out of line.
#include <sluice/dataflow/connector_parts.hpp>

#include <sluice/runtime/system.hpp>

#include <fmt/core.h>

#include <stop_token>
#include <system_error>

namespace sluice::dataflow::detail {

namespace {
// The frame: this byte, the run's length (one byte), the run, the connector's bytes.
constexpr std::byte frame_tag{0x52};  // 'R'
constexpr std::size_t max_run_bytes = 64;
}  // namespace

std::string new_sink_run() {
  // 64 random bits: two runs of any jobs meeting in one table, stream or cluster share a name as
  // often as two random 64-bit numbers are equal. (Through the thread's system: under the
  // simulation the bits come from its seed.)
  return fmt::format("{:016x}", runtime::sys().random_bits());
}

}  // namespace sluice::dataflow::detail

namespace sluice::dataflow {

sink_recovery recovery_of(std::vector<std::byte> precommitted, std::string run) {
  sink_recovery from;
  from.run = run.empty() ? detail::new_sink_run() : std::move(run);
  from.fresh = precommitted.empty();
  from.precommitted = std::move(precommitted);
  return from;
}

io::result<void> require_run(const sink_recovery& from, std::string_view sink) {
  if (!from.run.empty()) return io::result<void>{};
  return io::error(std::make_error_code(std::errc::invalid_argument),
                   fmt::format("{}: recover() without a run (sink_recovery::run is empty; dataflow::recovery_of "
                               "makes one): keyed on the job's name alone, its commits could be another job's",
                               sink));
}

}  // namespace sluice::dataflow

namespace sluice::dataflow::detail {

std::vector<std::byte> frame_sink_state(const std::string& run, std::vector<std::byte> body) {
  std::vector<std::byte> out;
  out.reserve(2 + run.size() + body.size());
  out.push_back(frame_tag);
  out.push_back(static_cast<std::byte>(run.size()));
  for (char c : run) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

io::result<sink_recovery> unframe_sink_state(std::vector<std::byte> state) {
  sink_recovery from;
  if (state.empty()) {
    from.run = new_sink_run();
    return from;
  }
  const std::size_t length = state.size() >= 2 ? std::to_integer<std::size_t>(state[1]) : 0;
  if (state.size() < 2 || state[0] != frame_tag || length == 0 || length > max_run_bytes || state.size() < 2 + length) {
    return io::error(std::make_error_code(std::errc::invalid_argument),
                     fmt::format("sink state in the checkpoint ({} bytes) does not start with the sink's run "
                                 "(a checkpoint of a sluice before 2026-12?): start with a new checkpoint directory",
                                 state.size()));
  }
  from.run.assign(reinterpret_cast<const char*>(state.data()) + 2, length);
  from.precommitted.assign(state.begin() + static_cast<std::ptrdiff_t>(2 + length), state.end());
  from.fresh = false;
  return from;
}

}  // namespace sluice::dataflow::detail

namespace sluice::dataflow::detail {

namespace {
runtime::task<bool> wait_event(runtime::event* e) { co_return co_await e->wait(); }
}  // namespace

runtime::task<void> wait_set_unstoppable(runtime::event* e) {
  while (!e->is_set()) {
    const bool woken = co_await runtime::with_stop_token(wait_event(e), std::stop_token{});
    (void)woken;
  }
}

}  // namespace sluice::dataflow::detail
