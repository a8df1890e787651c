// See fanout.hpp.

#include <sluice/dataflow/fanout.hpp>

#include <algorithm>

namespace sluice::dataflow {

fanout_tail::fanout_tail(buffers::result_partition& partition, std::size_t ports)
    : queued_output(partition), marks_(ports), ended_(ports, false), open_ports_(ports) {}

void fanout_tail::port_watermark(std::size_t port, std::uint64_t time) {
  if (ended_.at(port)) return;
  if (!marks_[port] || time > *marks_[port]) marks_[port] = time;
  forward_watermark();
}

void fanout_tail::port_end(std::size_t port) {
  if (ended_.at(port)) return;
  ended_[port] = true;
  if (--open_ports_ == 0) {
    queue_.push(pending_output{pending_output::kind::end_of_data, 0, {}, 0});
    return;
  }
  forward_watermark();  // the least over the ports still open may have risen
}

void fanout_tail::forward_watermark() {
  std::optional<std::uint64_t> least;
  for (std::size_t p = 0; p < marks_.size(); ++p) {
    if (ended_[p]) continue;
    if (!marks_[p]) return;  // a port without a watermark yet holds it back
    least = least ? std::min(*least, *marks_[p]) : *marks_[p];
  }
  if (!least || (sent_ && *least <= *sent_)) return;
  sent_ = least;
  queue_.push(pending_output{pending_output::kind::watermark, 0, {}, *least});
}

}  // namespace sluice::dataflow
